"""`kuberl plot` on two real short training runs: the files it writes (PNG and SVG, read back as
images and XML) and the figure behind them, and its errors for runs that cannot be drawn."""

import struct
import xml.etree.ElementTree as ET

import numpy as np
import pytest
import yaml
from matplotlib.image import imread

from kuberl_contract.plots import (
    DPI,
    EVALUATION_SUFFIX,
    FIGURE_INCHES,
    X_LABEL,
    Y_LABEL,
    learning_curves,
    read_run,
)
from testkit import edited, progress_rows, rljob, run_kuberl

SVG = "{http://www.w3.org/2000/svg}"
WIDTH, HEIGHT = (round(inches * DPI) for inches in FIGURE_INCHES)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two trained runs: `short` (3 iterations) and `long` (5, with a greedy evaluation), each
    about 256 env steps per iteration."""
    root = tmp_path_factory.mktemp("runs")
    for name, iterations, seed in (("short", 3, 1), ("long", 5, 2)):
        job = edited(
            rljob(name, rolloutWorkers={"replicas": 0, "envsPerWorker": 4}),
            **{"spec.trainer.stop": {"iterations": iterations}, "spec.trainer.seed": seed},
        )
        if name == "long":
            job["spec"]["trainer"]["evaluation"] = {"everyIterations": 2, "episodes": 2}
        manifest = root / f"{name}.yaml"
        manifest.write_text(yaml.safe_dump(job))
        trained = run_kuberl("train", manifest, "--run-dir", root / name)
        assert trained.returncode == 0, trained.stdout + trained.stderr
    return root / "short", root / "long"


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from the PNG signature and IHDR chunk."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_png_of_two_runs(runs, tmp_path):
    out = tmp_path / "curves.png"
    result = run_kuberl("plot", *runs, "-o", out)
    assert result.returncode == 0, result.stderr
    assert "learning curves of short, long" in result.stdout

    assert png_size(out.read_bytes()) == (WIDTH, HEIGHT)
    pixels = imread(out)
    assert pixels.shape[:2] == (HEIGHT, WIDTH)
    # Both runs' colours (matplotlib's C0 and C1) are drawn, not only the white background.
    for colour in ((0x1F, 0x77, 0xB4), (0xFF, 0x7F, 0x0E)):
        close = np.abs(pixels[..., :3] * 255 - np.array(colour)).max(axis=-1) < 8
        assert close.sum() > 100, colour


def test_the_figure_behind_it(runs):
    short, long = (read_run(path) for path in runs)
    assert (short.name, long.name) == ("short", "long")
    figure = learning_curves([short, long], "Learning curves")
    (axes,) = figure.axes
    assert (axes.get_xlabel(), axes.get_ylabel()) == (X_LABEL, Y_LABEL)
    long_steps = [row["timesteps_total"] for row in progress_rows(runs[1])]
    low, high = axes.get_xlim()
    assert low <= long_steps[0] and high >= long_steps[-1]  # the longer run's end too
    solid = [line for line in axes.get_lines() if line.get_linestyle() == "-"]
    assert [line.get_label() for line in solid] == ["short", "long"]
    assert list(solid[1].get_xdata()) == long_steps
    legend = [text.get_text() for text in axes.get_legend().get_texts()]
    assert legend == ["short", "long", "long" + EVALUATION_SUFFIX]
    dashed = [line for line in axes.get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == 1 and dashed[0].get_color() == solid[1].get_color()


def test_svg_of_two_runs(runs, tmp_path):
    out = tmp_path / "curves.svg"
    result = run_kuberl("plot", *runs, "--output", out)
    assert result.returncode == 0, result.stderr
    root = ET.parse(out).getroot()
    assert root.tag == SVG + "svg"
    assert (root.get("width"), root.get("height")) == tuple(f"{x * 72:g}pt" for x in FIGURE_INCHES)
    texts = {"".join(element.itertext()) for element in root.iter(SVG + "text")}
    assert {X_LABEL, Y_LABEL, "Learning curves"} <= texts
    (legend,) = (g for g in root.iter(SVG + "g") if g.get("id") == "legend_1")
    entries = ["".join(element.itertext()) for element in legend.iter(SVG + "text")]
    assert entries == ["short", "long", "long" + EVALUATION_SUFFIX]


def test_errors_name_the_run_and_the_option(runs, tmp_path):
    missing = run_kuberl("plot", runs[0], tmp_path / "nowhere", "-o", tmp_path / "x.png")
    assert missing.returncode == 2
    assert f"{tmp_path / 'nowhere'}: no such run directory" in missing.stderr
    assert not (tmp_path / "x.png").exists()

    (tmp_path / "bare").mkdir()
    bare = run_kuberl("plot", tmp_path / "bare", "-o", tmp_path / "x.png")
    assert bare.returncode == 2 and "no progress.jsonl" in bare.stderr

    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "progress.jsonl").write_text("")
    empty = run_kuberl("plot", tmp_path / "empty", "-o", tmp_path / "x.png")
    assert empty.returncode == 1 and "no progress rows yet" in empty.stderr

    (tmp_path / "garbled").mkdir()
    (tmp_path / "garbled" / "progress.jsonl").write_text('{"iteration": 1}\n')
    garbled = run_kuberl("plot", tmp_path / "garbled", "-o", tmp_path / "x.png")
    assert garbled.returncode == 1 and "progress.jsonl:1: not a progress row" in garbled.stderr

    unknown = run_kuberl("plot", runs[0], "-o", tmp_path / "x.jpg")
    assert unknown.returncode == 1
    assert "--output" in unknown.stderr and "'.jpg'" in unknown.stderr
