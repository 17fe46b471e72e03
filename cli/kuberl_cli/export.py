"""`kuberl export RUN_DIR | CHECKPOINT -o FILE`: a trained policy's greedy actions as one ONNX
graph (FILE.onnx) or TorchScript module (FILE.pt) that runs without kuberl."""

from __future__ import annotations

import sys
from pathlib import Path

from kuberl_cli.policies import EXIT_INVALID, EXIT_OK, named_policy


def export_command(path: str, output: Path) -> int:
    """0 once `output` is written and checked (one line says what it holds); 2 when nothing is at
    `path`, 1 when what is there holds no policy kuberl can load, or the policy cannot be
    exported to `output` (the reason on stderr)."""
    from kuberl_trainer.export import FORMATS, ExportError, export, input_spec, output_spec
    from kuberl_trainer.inference import load_checkpoint

    policy, exit_code = named_policy("export", path, load_checkpoint)
    if policy is None:
        return exit_code
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
