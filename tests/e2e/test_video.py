"""`kuberl evaluate --video`: the evaluation's episodes recorded as an MP4 (H.264, yuv420p, its
index first: what browsers play) or a GIF, read back frame by frame: each episode's length + 1
frames (its first state, then one per step), in episode order, the evaluation's numbers unchanged;
Atari recorded on envs that render, MuJoCo where a GL backend can render, a clear refusal where
none can."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import imageio.v3 as iio
import imageio_ffmpeg
import numpy as np
import pytest
import yaml
from PIL import Image, ImageSequence

from kuberl_trainer.rollouts.rollout_worker import run_episodes
from kuberl_trainer.trained.video import Recording, RecordingError
from testkit import fast_cartpole_job, rljob, run_kuberl, trainer_config

CARTPOLE_SIZE = (600, 400)  # width x height of CartPole's frames
CARTPOLE_FPS = 50  # its metadata's render_fps


def train(manifest: Path, run_dir: Path) -> Path:
    result = run_kuberl("train", manifest, "--run-dir", run_dir, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return run_dir


def evaluate(*args, env: dict[str, str] | None = None) -> dict:
    result = run_kuberl("evaluate", *args, "-o", "json", env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def without_video(record: dict) -> dict:
    return {key: value for key, value in record.items() if key != "video"}


def mp4_stream(path: Path) -> dict:
    """The video stream of an MP4 as ffmpeg (the bundled one) reads it: its codec, pixel format
    and size (width, height), and the frames it holds, counted by decoding them all."""
    result = subprocess.run(
        [imageio_ffmpeg.get_ffmpeg_exe(), "-hide_banner", "-i", str(path)],
        capture_output=True,
        text=True,
    )
    # "  Stream #0:0[0x1](und): Video: h264 (High) (avc1 / ...), yuv420p(progressive), 600x400, ..."
    video = next(line for line in result.stderr.splitlines() if "Video:" in line)
    codec = video.split("Video: ")[1].split()[0]
    pix_fmt = video.split("), ")[1].split("(")[0].split(",")[0]
    size = next(part for part in video.split(", ") if re.fullmatch(r"\d+x\d+", part.split()[0]))
    width, height = map(int, size.split()[0].split("x"))
    frames, _ = imageio_ffmpeg.count_frames_and_secs(str(path))
    return {"codec": codec, "pix_fmt": pix_fmt, "size": (width, height), "frames": frames}


def mp4_frames(path: Path) -> tuple[int, tuple[int, int]]:
    """The frames an MP4 holds, counted by decoding it, and their size (width, height); and it is
    an MP4 every browser plays: H.264 in yuv420p, its index (moov) before its data (mdat)."""
    stream = mp4_stream(path)
    assert (stream["codec"], stream["pix_fmt"]) == ("h264", "yuv420p"), stream
    data = path.read_bytes()
    assert 0 <= data.index(b"moov") < data.index(b"mdat")  # +faststart
    return stream["frames"], stream["size"]


def gif_frames(path: Path, fps: float) -> tuple[int, tuple[int, int]]:
    """The frames a GIF plays, counted by their durations (Pillow keeps a frame identical to the
    one before as one frame of twice the duration), and their size (width, height)."""
    frames = iio.imread(path, index=None)
    with Image.open(path) as gif:
        durations = [frame.info["duration"] for frame in ImageSequence.Iterator(gif)]
    assert len(durations) == len(frames)
    frame_duration = round(1000 / fps)
    assert all(duration % frame_duration == 0 for duration in durations), durations
    return sum(durations) // frame_duration, (frames.shape[2], frames.shape[1])


def frames_of(path: Path, fps: float) -> tuple[int, tuple[int, int]]:
    return mp4_frames(path) if path.suffix == ".mp4" else gif_frames(path, fps)


def recorded_frames(record: dict, episodes: int | None = None) -> int:
    """What the video of an evaluation must hold: each recorded episode's length + 1 frames."""
    return sum(length + 1 for length in record["lengths"][:episodes])


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory) -> Path:
    """cartpole-ppo-fast.yaml stopped after 2 iterations: episodes of tens of steps."""
    directory = tmp_path_factory.mktemp("cartpole")
    manifest = fast_cartpole_job(
        directory / "job.yaml", stop={"iterations": 2, "timesteps": 50_000}
    )
    return train(manifest, directory / "run")


@pytest.mark.parametrize("suffix", [".mp4", ".gif"])
def test_a_video_holds_every_frame_of_every_episode_in_order(cartpole_run, tmp_path, suffix):
    video = tmp_path / f"cartpole{suffix}"
    recorded = evaluate(cartpole_run, "--episodes", "3", "--seed", "7", "--video", video)
    plain = evaluate(cartpole_run, "--episodes", "3", "--seed", "7")

    assert without_video(recorded) == plain  # the same episodes, recorded or not
    assert recorded["video"] == {
        "path": str(video),
        "episodes": 3,
        "frames": recorded_frames(plain),
        "width": CARTPOLE_SIZE[0],
        "height": CARTPOLE_SIZE[1],
        "fps": CARTPOLE_FPS,
        "note": None,
    }
    assert frames_of(video, CARTPOLE_FPS) == (recorded_frames(plain), CARTPOLE_SIZE)


def test_video_episodes_records_the_first_episodes_only(cartpole_run, tmp_path):
    video = tmp_path / "first.mp4"
    result = run_kuberl(
        "evaluate", cartpole_run, "--episodes", "3", "--video", video, "--video-episodes", "1"
    )

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    first_length = int(lines[2].split()[-1])  # "  episode   0  seed 0  return ...  length N"
    frames = first_length + 1
    assert lines[-1] == f"video: {video} (1 episode, {frames} frames, 600 x 400, 50 fps)"
    assert mp4_frames(video) == (frames, CARTPOLE_SIZE)
    # A progress line on stderr, redrawn in place (each \r a line break once read as text): the
    # one episode recorded, shown once, then the writing.
    assert result.stderr.splitlines() == [
        "",
        f"recording {video}: episode 1 of 1",
        f"writing {video}: {frames} frames",
    ]


def test_an_unknown_suffix_or_video_episodes_alone_is_refused_before_anything_runs(tmp_path):
    # The directory holds no checkpoint: the suffix is refused before anything is loaded.
    unknown = run_kuberl("evaluate", tmp_path, "--video", tmp_path / "out.avi")
    assert unknown.returncode == 1
    assert unknown.stdout == ""
    assert "cannot record a video as .avi; use .mp4 (MP4 (H.264)), .gif (GIF)" in unknown.stderr
    assert not (tmp_path / "out.avi").exists()

    alone = run_kuberl("evaluate", tmp_path, "--video-episodes", "2")
    assert alone.returncode == 1
    assert "give --video too" in alone.stderr


def test_an_exported_policy_records_the_episodes_of_its_run(cartpole_run, tmp_path):
    exported = tmp_path / "policy.onnx"
    result = run_kuberl("export", cartpole_run, "-o", exported)
    assert result.returncode == 0, result.stderr
    video = tmp_path / "exported.mp4"

    recorded = evaluate(exported, "--episodes", "2", "--video", video)
    from_run = evaluate(cartpole_run, "--episodes", "2")

    assert (recorded["returns"], recorded["lengths"]) == (from_run["returns"], from_run["lengths"])
    assert recorded["video"]["frames"] == recorded_frames(from_run)
    assert mp4_frames(video) == (recorded_frames(from_run), CARTPOLE_SIZE)


def job_manifest(path: Path, **trainer) -> Path:
    """A one-iteration job of `trainer` on the local worker's 2 envs, checkpointed at its end."""
    trainer = {"algorithm": "PPO", "seed": 0, "stop": {"iterations": 1}} | trainer
    manifest = rljob("video", trainer=trainer, rolloutWorkers={"replicas": 0, "envsPerWorker": 2})
    path.write_text(yaml.safe_dump(manifest))
    return path


def test_atari_is_recorded_on_envs_that_render_and_says_its_episodes_differ(tmp_path):
    pytest.importorskip("ale_py", reason="ale-py is installed with the trainer")
    manifest = job_manifest(
        tmp_path / "pong.yaml",
        env="ALE/Pong-v5",
        # Short games: truncated after 400 frames (100 steps of 4 frames), recorded as trained.
        envConfig={"num_threads": 1, "max_num_frames_per_episode": 400},
        hyperparameters={"rollout_length": 8, "num_epochs": 1, "minibatch_size": 16},
    )
    run_dir = train(manifest, tmp_path / "run")
    video = tmp_path / "pong.mp4"

    recorded = evaluate(run_dir, "--episodes", "1", "--video", video)

    length = recorded["lengths"][0]
    assert 50 < length <= 100  # truncated by max_num_frames_per_episode, which it honours
    assert recorded["video"]["frames"] == length + 1
    assert (recorded["video"]["width"], recorded["video"]["height"]) == (160, 210)
    assert recorded["video"]["fps"] == 15  # the Atari's 60 frames a second, 4 a step
    assert "its episodes differ from those evaluated without a video" in recorded["video"]["note"]
    assert mp4_frames(video) == (length + 1, (160, 210))


@pytest.fixture(scope="module")
def mujoco_run(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("mujoco")
    manifest = job_manifest(
        directory / "pendulum.yaml",
        env="InvertedPendulum-v5",
        hyperparameters={"rollout_length": 16, "num_epochs": 1, "minibatch_size": 16},
    )
    return train(manifest, directory / "run")


def egl_renders() -> bool:
    """Whether MuJoCo can make an EGL context on this machine (its libraries installed)."""
    probe = "from mujoco.egl import GLContext; GLContext(8, 8).free()"
    environment = dict(os.environ, MUJOCO_GL="egl")
    return subprocess.run([sys.executable, "-c", probe], env=environment).returncode == 0


def test_mujoco_renders_headless_through_egl(mujoco_run, tmp_path):
    if not egl_renders():
        pytest.skip("no EGL here: see the next test for what evaluate says then")
    no_display = ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL")
    environment = {k: v for k, v in os.environ.items() if k not in no_display}
    video = tmp_path / "pendulum.mp4"

    recorded = evaluate(mujoco_run, "--episodes", "2", "--video", video, env=environment)

    assert without_video(recorded) == evaluate(mujoco_run, "--episodes", "2")
    assert mp4_frames(video) == (recorded_frames(recorded), (480, 480))


def test_an_env_that_cannot_render_is_refused_with_the_reason(mujoco_run, tmp_path):
    # GLFW, MuJoCo's default, needs a display: without one, nothing renders.
    environment = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    video = tmp_path / "pendulum.mp4"

    result = run_kuberl(
        "evaluate", mujoco_run, "--video", video, env=environment | {"MUJOCO_GL": "glfw"}
    )

    assert result.returncode == 1
    assert result.stdout == ""  # refused before any episode is played
    assert f"kuberl evaluate: cannot record {video}: InvertedPendulum-v5 cannot render" in (
        result.stderr
    )
    assert "MUJOCO_GL=egl or osmesa" in result.stderr
    assert not video.exists()


class WithoutRenderMode(gym.Env):
    """An env that takes no render_mode, and fails a test that steps it."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        raise AssertionError("an episode was played")


class RenderingNothing(WithoutRenderMode):
    """An env that takes render_mode and renders nothing (gymnasium.Env's render)."""

    def __init__(self, render_mode=None):
        self.render_mode = render_mode


@pytest.mark.parametrize(
    "env_class, reason",
    [
        ("WithoutRenderMode", "cannot be made to render frames: .* takes no arguments"),
        ("RenderingNothing", "cannot render: NotImplementedError"),
    ],
)
def test_an_env_without_frames_is_refused_before_a_step_is_played(env_class, reason, tmp_path):
    config = trainer_config(algorithm="PPO", env=f"{__name__}:{env_class}")
    video = tmp_path / "nothing.mp4"

    def play() -> None:
        with Recording(video, config, episodes=2) as recording:
            act = lambda obs, _: np.zeros(len(obs), np.int64)  # noqa: E731
            run_episodes(recording.envs, 2, act, seed=0, observe=recording.record)

    with pytest.raises(RecordingError, match=reason):
        play()
    assert not video.exists()


class OddFrames(gym.Env):
    """Episodes of 3 steps whose frames are 151 x 101 (odd both ways), each a shade lighter."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)
    metadata = {"render_fps": 10}

    def __init__(self, render_mode=None):
        self.render_mode = render_mode
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.steps += 1
        return np.zeros(2, np.float32), 1.0, self.steps == 3, False, {}

    def render(self):
        return np.full((101, 151, 3), 40 * self.steps, np.uint8)


def test_odd_frames_are_padded_to_the_even_size_h264_takes_and_only_asked_episodes_kept(tmp_path):
    config = trainer_config(algorithm="PPO", env=f"{__name__}:OddFrames")
    video = tmp_path / "odd.mp4"

    with Recording(video, config, episodes=3, video_episodes=2, progress=None) as recording:
        act = lambda obs, _: np.zeros(len(obs), np.int64)  # noqa: E731
        _, lengths = run_episodes(recording.envs, 3, act, seed=0, observe=recording.record)
        saved = recording.save()

    assert list(lengths) == [3, 3, 3]  # three episodes played, the first two recorded
    assert (saved.episodes, saved.frames, saved.width, saved.height) == (2, 8, 152, 102)
    assert mp4_frames(video) == (8, (152, 102))
