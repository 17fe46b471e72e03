"""`spec.trainer.model`: how observations are encoded before the policy's dense layers (RLlib's
model config vocabulary: convFilters, convActivation, vfShareLayers).

The dense layers themselves stay `hyperparameters.hidden_sizes` and `hyperparameters.activation`,
where every algorithm has had them: they are the MLP encoder's layers. The CNN encoder is the
convolutions and one dense layer of `features` units, followed by linear heads, as the Nature CNN
and Stable-Baselines3's CnnPolicy are."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from kuberl_contract.config.base import Spec
from kuberl_contract.hyperparameters.known_as import KnownAs

NATURE_CNN = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
"""The convolutions of the Nature DQN (Mnih et al. 2015), for 84x84 frames."""

ConvFilter = Annotated[
    list[Annotated[int, Field(ge=1, le=1024)]],
    Field(min_length=3, max_length=3, description="[out_channels, kernel, stride]"),
]
"""One convolution: [out_channels, kernel, stride], a square kernel with no padding. (A list, not
a tuple: a Kubernetes structural schema types every array's items.)"""

Encoder = Literal["auto", "mlp", "cnn"]
MemoryType = Literal["lstm", "gru"]
Precision = Literal["auto", "float32", "bfloat16"]


class RecurrentConfig(Spec):
    """A memory between the encoder and the policy and value heads: an LSTM or GRU whose state is
    carried across a lane's env steps and starts at zero with each episode."""

    type: MemoryType = "lstm"
    """lstm: a long short-term memory (Hochreiter and Schmidhuber 1997), with a hidden and a cell
    state; gru: a gated recurrent unit (Cho et al. 2014), with a hidden state only."""

    size: int = Field(64, ge=1, le=4096)
    """Units of the memory, which the policy and value heads read."""

    max_seq_len: Annotated[
        int | None,
        KnownAs("steps backpropagated through time", rllib="max_seq_len"),
    ] = Field(None, ge=1, le=100_000)
    """The length of the sequences the learner unrolls the memory over, each from the state the
    workers acted with at its first step: a lane's rollout is cut into sequences of this many
    steps, and PPO's minibatches are whole sequences. null: each lane's whole rollout
    (rollout_length steps) is one sequence."""


class ModelConfig(Spec):
    """The policy's encoder of observations, chosen from the observation space by default."""

    encoder: Encoder = "auto"
    """cnn: convolutions over image observations (a Box of rank 3 as (C, H, W) or (H, W, C), or
    of rank 2 as (H, W)); mlp: the observations flattened into dense layers. auto picks cnn for
    uint8 Boxes of rank 2 or 3 (frames, as Atari's) and mlp for everything else. uint8 images stay
    uint8 until the CNN's first layer, which scales them to [0, 1]."""

    conv_filters: Annotated[
        list[ConvFilter],
        KnownAs("the CNN's [out_channels, kernel, stride] layers", rllib="conv_filters"),
    ] = Field(
        default_factory=lambda: [list(layer) for layer in NATURE_CNN], min_length=1, max_length=8
    )
    """The CNN's convolutions, [[out_channels, kernel, stride], ...], each without padding; the
    default is the Nature CNN's [[32, 8, 4], [64, 4, 2], [64, 3, 1]] for 84x84 frames. Small
    images need smaller ones: [[16, 3, 1], [32, 3, 1]] for 10x10."""

    conv_activation: Literal["relu", "tanh"] = "relu"
    """Nonlinearity after each convolution and after the CNN's dense layer."""

    features: int = Field(512, ge=1, le=4096)
    """Units of the dense layer that ends the CNN (the Nature CNN's 512), which the policy and
    value heads (and DQN's Q head) read."""

    vf_share_layers: Annotated[
        bool | None,
        KnownAs(
            "whether the policy and the value function share the encoder; null shares the CNN only",
            sb3="share_features_extractor",
            rllib="vf_share_layers",
        ),
    ] = None
    """Whether the policy and the value function share the encoder (one trunk, one forward pass)
    or each have their own. null: shared with the CNN, whose convolutions are most of the
    compute (as Atari PPO and IMPALA share them), separate with the MLP (as for control tasks).
    With the CNN shared, the value loss's gradient shapes the policy's features too; its weight is
    the algorithm's vf_coeff."""

    precision: Precision = "auto"
    """The CNN's arithmetic: float32, or bfloat16 (mixed precision: the convolutions and the
    CNN's dense layer compute in bfloat16; the weights, the optimizer, the heads and the losses
    stay float32, and checkpoints and exported policies are float32). auto: bfloat16 on a CPU
    with native bfloat16 (AVX512-BF16 or AMX), where it acts and learns faster, for CNNs of at
    least a million multiply-adds per image (the Nature CNN takes 9 million; a smaller one gains
    less than its conversions cost), float32 otherwise and on GPUs. The MLP is always float32.
    Actions are sampled from what the bfloat16 network computed, and that is what is recorded as
    the behaviour policy, so PPO's ratios and V-trace's weights correct for the difference from
    the float32 learner."""

    recurrent: RecurrentConfig | None = None
    """A memory after the encoder (MLP or CNN), for partially observed envs: the policy and the
    value function share the encoder and the memory, and act on what the lane saw since its
    episode began. PPO and A2C (A3C) take one. null: no memory, each action from the current
    observation alone."""
