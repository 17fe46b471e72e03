"""Recording an evaluation's episodes as a video: its envs made to render `rgb_array` frames, each
episode's frames kept apart while the episodes play together (each on an env of its own in the
vector env), then written in episode order to an MP4 (H.264, which browsers and chat previews play:
the ffmpeg imageio-ffmpeg bundles) or a GIF (imageio).

    with Recording("cartpole.mp4", config, episodes=3) as recording:
        returns, lengths = run_episodes(recording.envs, 3, act, seed=0, observe=recording.record)
        video = recording.save()

An episode's frames are what its env shows once reset, then after each step the episode counts:
its length + 1 frames. `run_episodes` says which episode each env shows (`observe`): the step that
resets an env whose episode ended shows the first state of the env's next episode, and nothing of
the episode before.

The envs are the evaluation's own, made with `render_mode="rgb_array"`, so the episodes are the
same as without a video, except with ale-py's vector env, which cannot render: Atari is then played
on envs made one at a time with gymnasium's Atari wrappers set as the vector env's preprocessing
(`atari.rendering_env`), whose episodes are others.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple, TextIO

import gymnasium as gym
import lz4.block
import numpy as np

from kuberl_trainer.envs import atari
from kuberl_trainer.envs.making import EnvError, make_vector_env

FORMATS = {".mp4": "MP4 (H.264)", ".gif": "GIF"}
"""The file suffixes a video is written to, and what each one is."""
DEFAULT_EPISODES = 10
"""Episodes recorded unless told otherwise: the first ten, which keeps files small."""
DEFAULT_FPS = 30
"""Frames per second of an env whose metadata says nothing of its `render_fps`."""
ATARI_FRAME_RATE = 60
"""Frames per second of the Atari 2600, which ale-py's `render_fps` (30) does not give."""


class RecordingError(Exception):
    """The video cannot be recorded (a suffix not known, an env that cannot render), and why."""


@dataclass(frozen=True)
class Video:
    """A recorded video: where, how many episodes and frames, their size and rate, and a note when
    its episodes are not those an evaluation without a video plays."""

    path: str
    episodes: int
    frames: int
    width: int
    height: int
    fps: float
    note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        """`video: cartpole.mp4 (3 episodes, 412 frames, 600 x 400, 50 fps)`."""
        episodes = f"{self.episodes} episode{'' if self.episodes == 1 else 's'}"
        return (
            f"video: {self.path} ({episodes}, {self.frames} frames, {self.width} x {self.height}, "
            f"{self.fps:g} fps)"
        )


def check_video_path(path: str | Path) -> Path:
    """`path` as a Path when its suffix is a video format's; RecordingError naming the accepted
    ones otherwise."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        accepted = ", ".join(f"{suffix} ({name})" for suffix, name in FORMATS.items())
        raise RecordingError(
            f"{path}: cannot record a video as {path.suffix or 'no suffix'}; use {accepted}"
        )
    return path


# -- envs that render ---------------------------------------------------------------------------


class RenderingEnvs(NamedTuple):
    """Envs made to render, the rate their frames play at, and a note when their episodes are not
    the evaluation's own."""

    envs: gym.vector.VectorEnv
    fps: float
    note: str | None


def rendering_envs(config: Any, num_envs: int) -> RenderingEnvs:
    """`num_envs` envs of the job (`config` is its spec.trainer) rendering `rgb_array` frames: made
    as evaluation makes them, with `render_mode` added to the envConfig (a native vector env and
    gymnasium.make take it alike), except ale-py's vector env, which cannot render."""
    _render_without_a_display()
    atari.register(config.env)
    try:
        if not config.wrappers and atari.is_atari_vector(config.env):
            return _atari_rendering_envs(config.env, config.env_config, num_envs)
        env_config = {**config.env_config, "render_mode": "rgb_array"}
        envs = make_vector_env(config.env, env_config, num_envs, config.wrappers)
    except EnvError as exc:
        raise RecordingError(f"{config.env} cannot be made to render frames: {exc}") from exc
    return RenderingEnvs(envs, envs.metadata.get("render_fps") or DEFAULT_FPS, None)


def _render_without_a_display() -> None:
    """Renderers' defaults on a machine without a display (a pod, CI), unless set otherwise: SDL
    (pygame, the classic control envs) draws offscreen instead of probing for a display, and
    MuJoCo renders through EGL, as its default GLFW needs a display."""
    if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
        return
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("MUJOCO_GL", "egl")


def _atari_rendering_envs(env: str, env_config: dict[str, Any], num_envs: int) -> RenderingEnvs:
    """Envs of an `ALE/*` id made one at a time as `atari.rendering_env`, reset as every vector env
    of kuberl's (next-step autoreset)."""
    frame_skip = int(env_config.get("frameskip", gym.spec(env).kwargs.get("frameskip", 4)))
    try:
        envs = gym.vector.SyncVectorEnv(
            [lambda: atari.rendering_env(env, env_config) for _ in range(num_envs)],
            autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,
        )
    except Exception as exc:  # gymnasium's and ale-py's errors: many kinds
        raise EnvError(f"cannot make {env!r} with envConfig {env_config}: {exc}") from exc
    note = (
        f"{env} was played on envs made one at a time, which render (ale-py's vector env cannot): "
        "its episodes differ from those evaluated without a video"
    )
    return RenderingEnvs(envs, ATARI_FRAME_RATE / frame_skip, note)


# -- frames -------------------------------------------------------------------------------------


def render_frames(envs: gym.vector.VectorEnv, indices: Sequence[int]) -> list[np.ndarray]:
    """The frames that envs `indices` of `envs` show, as (H, W, 3) uint8 arrays. Envs made one by
    one render one by one, so only those asked for; a native vector env renders all of them."""
    if isinstance(envs, gym.vector.SyncVectorEnv):
        frames = [envs.envs[index].render() for index in indices]
    else:
        rendered = envs.render()
        frames = [rendered[index] for index in indices] if rendered is not None else [None]
    for frame in frames:
        if not _is_rgb(frame):
            described = getattr(frame, "shape", type(frame).__name__)
            raise RecordingError(f"its render() gave {described}, not an RGB frame")
    return frames


def _is_rgb(frame: Any) -> bool:
    """Whether `frame` is an (H, W, 3) uint8 array, as `rgb_array` renders are."""
    return (
        isinstance(frame, np.ndarray)
        and frame.dtype == np.uint8
        and frame.ndim == 3
        and frame.shape[-1] == 3
    )


class EpisodeFrames:
    """The frames of episodes 0 to `episodes` - 1, each episode's apart, in the order they came.
    They are kept LZ4-compressed: a 600x400 frame takes 720 KB raw, and ten episodes of 500 steps
    would take 3.6 GB; most frames are mostly background, which compresses a hundredfold."""

    def __init__(self, episodes: int):
        self.episodes = episodes
        self.compressed: list[list[bytes]] = [[] for _ in range(episodes)]
        self.shape: tuple[int, ...] | None = None

    def recorded(self, episodes: np.ndarray) -> np.ndarray:
        """Which envs show an episode being recorded, given the episode each env shows (-1:
        none)."""
        return np.flatnonzero((episodes >= 0) & (episodes < self.episodes))

    def add(self, episode: int, frame: np.ndarray) -> None:
        """`frame` as the next one of `episode`; every frame must have the first one's size."""
        if self.shape is None:
            self.shape = frame.shape
        elif frame.shape != self.shape:
            raise RecordingError(
                f"its frames change size ({self.shape} first, then {frame.shape}), which a video "
                "cannot hold"
            )
        self.compressed[episode].append(lz4.block.compress(frame.tobytes()))

    @property
    def count(self) -> int:
        return sum(len(frames) for frames in self.compressed)

    @property
    def started(self) -> int:
        """How many episodes have frames (episodes play together, so not always the first)."""
        return sum(1 for frames in self.compressed if frames)

    def __iter__(self) -> Iterator[np.ndarray]:
        """Every frame, episode 0's first, decompressed one at a time."""
        for episode in self.compressed:
            for data in episode:
                yield np.frombuffer(lz4.block.decompress(data), dtype=np.uint8).reshape(self.shape)


# -- recording ----------------------------------------------------------------------------------


class Recording:
    """Envs of the job that render, for an evaluation of `episodes` episodes to play on, and the
    frames of its first `video_episodes` episodes (default: all of them, at most
    DEFAULT_EPISODES), which `save` writes to `path`. `observation_shape`, when given, is what the
    policy takes: envs whose observations differ are refused. A line on `progress` (None: none)
    says which episode is being recorded, then that the file is being written."""

    def __init__(
        self,
        path: str | Path,
        config: Any,
        episodes: int,
        video_episodes: int | None = None,
        observation_shape: tuple[int, ...] | None = None,
        progress: TextIO | None = sys.stderr,
    ):
        self.path = check_video_path(path)
        self.progress = progress
        self._shown = ""  # the progress line on show
        if video_episodes is not None and video_episodes < 1:
            raise RecordingError(f"video episodes must be at least 1, got {video_episodes}")
        self.env_id = config.env
        self.envs, self.fps, self.note = rendering_envs(config, episodes)
        shape = self.envs.single_observation_space.shape
        if observation_shape is not None and tuple(shape) != tuple(observation_shape):
            self.close()
            raise RecordingError(
                f"{self.env_id} renders on envs whose observations have shape {shape}, where the "
                f"policy takes {tuple(observation_shape)}"
            )
        recorded = DEFAULT_EPISODES if video_episodes is None else video_episodes
        self.frames = EpisodeFrames(min(recorded, episodes))

    def record(self, envs: gym.vector.VectorEnv, episodes: np.ndarray) -> None:
        """Keep the frames the envs show now, given the episode each one shows (-1: none): the
        `observe` of `run_episodes`. A failure to render is a RecordingError saying why."""
        indices = self.frames.recorded(episodes)
        if len(indices) == 0:
            return
        try:
            frames = render_frames(envs, indices)
        except RecordingError as exc:
            raise RecordingError(f"{self.env_id} cannot render: {exc}") from exc
        except Exception as exc:  # each renderer fails its own way (pygame, OpenGL, MuJoCo)
            raise RecordingError(self._render_failure(exc)) from exc
        for index, frame in zip(indices, frames, strict=True):
            self.frames.add(int(episodes[index]), frame)
        self._show(
            f"recording {self.path}: episode {self.frames.started} of {self.frames.episodes}"
        )

    def _render_failure(self, exc: Exception) -> str:
        why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        message = f"{self.env_id} cannot render: {why}"
        if "mujoco" in str(getattr(gym.registry.get(self.env_id), "entry_point", "")):
            message += (
                f" (MUJOCO_GL={os.environ.get('MUJOCO_GL', '')}: MuJoCo renders without a display "
                "with MUJOCO_GL=egl or osmesa, which need EGL's or OSMesa's libraries)"
            )
        return message

    def save(self) -> Video:
        """Write the recorded frames to the path, episode 0's first (its folder made if need
        be)."""
        if self.frames.shape is None:
            raise RecordingError("no frame was recorded")
        height, width = self.frames.shape[:2]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        mp4 = self.path.suffix.lower() == ".mp4"
        self._show(f"writing {self.path}: {self.frames.count} frames", end=True)
        try:
            (write_mp4 if mp4 else write_gif)(
                self.path, iter(self.frames), self.fps, (width, height)
            )
        except Exception:
            self.path.unlink(missing_ok=True)  # no half-written video left behind
            raise
        if mp4:  # H.264 with 4:2:0 chroma takes even sizes: the odd row or column was padded
            width, height = even(width), even(height)
        return Video(
            str(self.path),
            self.frames.episodes,
            self.frames.count,
            width,
            height,
            float(self.fps),
            self.note,
        )

    def _show(self, line: str, end: bool = False) -> None:
        """`line` on `progress` in place of the one before (a carriage return), ended by `end`;
        nothing when it is the line on show (frames come every step, episodes seldom)."""
        if self.progress is not None and line != self._shown:
            self.progress.write(f"\r{line}" + ("\n" if end else ""))
            self.progress.flush()
            self._shown = line

    def close(self) -> None:
        self.envs.close()

    def __enter__(self) -> Recording:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


# -- writing ------------------------------------------------------------------------------------


MP4_OUTPUT = [
    # An odd width or height padded by a black row or column: yuv420p halves both for colour.
    *("-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2"),
    # The index (moov atom) first, so a browser plays the file while it downloads.
    *("-movflags", "+faststart"),
    # A profile and level that browsers, phones and chat previews all decode.
    *("-profile:v", "high", "-level", "4.0"),
]
"""What ffmpeg is told beyond the codec and pixel format to make an MP4 that plays everywhere."""


def even(size: int) -> int:
    """`size` rounded up to an even number, as MP4_OUTPUT pads it."""
    return size + size % 2


def write_mp4(path: Path, frames: Iterator[np.ndarray], fps: float, size: tuple[int, int]) -> None:
    """RGB frames of `size` (width, height) as an H.264 MP4 (yuv420p, even sizes, the index first),
    one at a time, through the ffmpeg imageio-ffmpeg bundles."""
    import imageio_ffmpeg  # imported when a video is written: loading policies needs none of it

    writer = imageio_ffmpeg.write_frames(
        str(path),
        size,
        pix_fmt_in="rgb24",
        pix_fmt_out="yuv420p",
        fps=float(fps),
        codec="libx264",
        quality=None,  # libx264's own default quality (CRF 23), not a bitrate imageio picks
        macro_block_size=1,  # padded to even sizes (MP4_OUTPUT), never rescaled
        output_params=MP4_OUTPUT,
    )
    try:
        writer.send(None)  # ffmpeg starts
        for frame in frames:
            writer.send(np.ascontiguousarray(frame))
    except (OSError, RuntimeError) as exc:  # ffmpeg could not start, or stopped writing
        raise RecordingError(f"{path}: ffmpeg cannot write an MP4 video there: {exc}") from exc
    finally:
        writer.close()


def write_gif(path: Path, frames: Iterator[np.ndarray], fps: float, size: tuple[int, int]) -> None:
    """RGB frames as a looping GIF (imageio with Pillow). Pillow holds every frame until it writes
    the file (a GIF suits a few short episodes), and merges a frame identical to the one before
    into it, their durations added: the GIF plays the same frames for as long."""
    import imageio.v3 as iio  # imported when a video is written, as cv2

    duration = round(1000 / fps)  # milliseconds per frame (GIF keeps hundredths of a second)
    with iio.imopen(path, "w", plugin="pillow", extension=".gif") as file:
        for frame in frames:
            # Each frame reduced to 256 colours as it comes (a GIF holds no more), so the frames
            # held take a byte a pixel instead of three.
            file.write(frame, duration=duration, loop=0, bits=8)
