"""`kuberl export RUN_DIR | CHECKPOINT -o FILE`: a trained policy's greedy actions as one ONNX
graph (FILE.onnx) or TorchScript module (FILE.pt) that runs without kuberl."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

EXIT_OK, EXIT_INVALID, EXIT_NO_FILE = 0, 1, 2


def export_command(path: str, output: Path) -> int:
    """0 once `output` is written and checked (one line says what it holds); 2 when nothing is at
    `path`, 1 when what is there holds no policy kuberl can load, or the policy cannot be
    exported to `output` (the reason on stderr)."""
    if "://" not in path and not Path(path).exists():
        print(f"kuberl export: {path}: no such file or directory", file=sys.stderr)
        return EXIT_NO_FILE
    from kuberl_trainer.export import FORMATS, ExportError, export, input_spec, output_spec
    from kuberl_trainer.inference import LoadError, load_checkpoint

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    try:
        policy = load_checkpoint(path)
    except LoadError as exc:
        print(f"kuberl export: {exc}", file=sys.stderr)
        return EXIT_INVALID
    try:
        written = export(policy, output)
    except (ExportError, ValueError, OSError) as exc:
        print(f"kuberl export: {exc}", file=sys.stderr)
        return EXIT_INVALID
    finally:
        policy.close()
    print(
        f"{written}: {policy.config.algorithm} on {policy.config.env}, greedy policy, "
        f"{FORMATS[written.suffix]}, input obs {input_spec(policy)}, "
        f"output actions {output_spec(policy)}"
    )
    return EXIT_OK
