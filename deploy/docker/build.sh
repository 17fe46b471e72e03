#!/usr/bin/env bash
# Builds kuberl's container images with buildah (see deploy/docker/README.md):
#
#   bash deploy/docker/build.sh [--debootstrap] [--rebuild-base] [IMAGE...]
#
# IMAGE is operator, api, trainer (CPU) or trainer-cuda; the default is operator, api and trainer.
# First a wheelhouse is filled on this machine (build/wheelhouse/: the project's wheel and its
# pinned dependencies, with this machine's pip configuration); the images install from it only.
#
# Environment:
#   BASE_IMAGE       the images' base (default: the pinned official Python 3.11 slim bookworm one,
#                    or where it cannot be pulled, the --debootstrap one)
#   PYTHON           the Python 3.11 that fills the wheelhouse (default: python3)
#   REGISTRY         where the image names point (default: ghcr.io/kuberl)
#   TORCH_INDEX_URL  an extra index with a CPU build of torch for the CPU wheelhouse, where pip's
#                    own configuration has none (e.g. https://download.pytorch.org/whl/cpu)
#   CUDA_INDEX_URL   the only index of the CUDA wheelhouse (default: PyPI, whose torch is CUDA's)
#   DEBIAN_MIRROR    debootstrap's mirror (default: http://deb.debian.org/debian)
#   REVISION, CREATED, SOURCE   OCI labels (default: git HEAD, now, the project's repository)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DOCKERFILE="$ROOT/deploy/docker/Dockerfile"
WHEELHOUSE="$ROOT/build/wheelhouse"
PYTHON=${PYTHON:-python3}
REGISTRY=${REGISTRY:-ghcr.io/kuberl}
CUDA_INDEX_URL=${CUDA_INDEX_URL:-https://pypi.org/simple}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SOURCE=${SOURCE:-https://github.com/kuberl/kuberl}
# Made by --debootstrap when missing, from Debian's archive alone (no container registry).
DEBOOTSTRAP_BASE=localhost/kuberl-base:bookworm
# What KubeRay and the head's preStop hook run in the trainer image, and Python's venv.
DEBOOTSTRAP_PACKAGES=python3,python3-venv,procps,wget,ca-certificates
export BUILDAH_ISOLATION=${BUILDAH_ISOLATION:-chroot}

fail() {
  echo "build.sh: $*" >&2
  exit 2
}

usage() {
  # The comment block at the top of this file.
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"
}

debootstrap=false
rebuild_base=false
images=()
for arg in "$@"; do
  case "$arg" in
    --debootstrap) debootstrap=true ;;
    --rebuild-base) debootstrap=true rebuild_base=true ;;
    -h | --help) usage; exit 0 ;;
    operator | api | trainer | trainer-cuda) images+=("$arg") ;;
    -*) fail "unknown option '$arg' (see --help)" ;;
    *) fail "unknown image '$arg': choose from operator, api, trainer, trainer-cuda" ;;
  esac
done
[ ${#images[@]} -gt 0 ] || images=(operator api trainer)

if $debootstrap && [ -n "${BASE_IMAGE:-}" ]; then
  fail "BASE_IMAGE=$BASE_IMAGE and --debootstrap: give one of them"
fi
[ "$(id -u)" = 0 ] || fail "needs root: buildah builds the images as root here (run with sudo)"
command -v buildah >/dev/null || fail "needs buildah (Debian/Ubuntu package buildah)"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null \
  || fail "PYTHON=$PYTHON: must be a Python 3.11, the images' Python (the wheels are for it)"

VERSION=$("$PYTHON" -c 'import sys, tomllib
print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' "$ROOT/pyproject.toml")
REVISION=${REVISION:-$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)}
CREATED=${CREATED:-$(date -u +%Y-%m-%dT%H:%M:%SZ)}

scratch=$(mktemp -d "${TMPDIR:-/tmp}/kuberl-images.XXXXXX")
# debootstrap mounts /proc, /sys and the host's device nodes inside the root filesystem it makes; a
# run cut short can leave them mounted, and removing the scratch directory must never follow them.
remove_scratch() {
  findmnt -rn -o TARGET | grep "^$scratch/" | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  rm -rf --one-file-system "$scratch"
}
trap remove_scratch EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- The base image ------------------------------------------------------------------------------

# A Debian bookworm image from debootstrap, imported into buildah's storage; kept there and reused
# by later builds (--rebuild-base makes it again).
make_debootstrap_base() {
  if ! $rebuild_base && buildah inspect --type image "$DEBOOTSTRAP_BASE" >/dev/null 2>&1; then
    return
  fi
  command -v debootstrap >/dev/null || fail "--debootstrap needs debootstrap (Debian package)"
  echo "== base: debootstrap bookworm from $DEBIAN_MIRROR into $DEBOOTSTRAP_BASE"
  local rootfs="$scratch/rootfs" container mount
  debootstrap --variant=minbase --include="$DEBOOTSTRAP_PACKAGES" bookworm "$rootfs" \
    "$DEBIAN_MIRROR" >"$scratch/debootstrap.log" 2>&1 \
    || { tail -20 "$scratch/debootstrap.log" >&2; fail "debootstrap failed (log above)"; }
  # What an image does not need: apt's downloads and indexes, documentation, translations.
  rm -rf "$rootfs"/var/cache/apt/* "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/* \
    "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/* "$rootfs"/var/log/*.log
  container=$(buildah from scratch)
  mount=$(buildah mount "$container")
  tar -C "$rootfs" --one-file-system -cf - . | tar -C "$mount" -xpf -
  buildah umount "$container" >/dev/null
  buildah config --env LANG=C.UTF-8 \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --cmd /bin/bash --label "org.opencontainers.image.description=Debian bookworm (debootstrap)" \
    "$container"
  buildah commit --quiet --rm "$container" "$DEBOOTSTRAP_BASE" >/dev/null
  rm -rf --one-file-system "$rootfs"
}

# The official base when neither BASE_IMAGE nor --debootstrap is given; where its registry cannot be
# reached, the debootstrapped one.
if ! $debootstrap && [ -z "${BASE_IMAGE:-}" ]; then
  official=$(sed -n 's/^ARG BASE_IMAGE=//p' "$DOCKERFILE")
  if buildah inspect --type image "$official" >/dev/null 2>&1 \
    || buildah pull --quiet "$official" >/dev/null 2>"$scratch/pull.log"; then
    BASE_IMAGE=$official
  elif command -v debootstrap >/dev/null; then
    echo "== base: cannot pull $official ($(tail -1 "$scratch/pull.log")); using --debootstrap"
    debootstrap=true
  else
    fail "cannot pull $official: $(tail -1 "$scratch/pull.log"); give BASE_IMAGE, or install" \
      "debootstrap and use --debootstrap"
  fi
fi
if $debootstrap; then
  make_debootstrap_base
  BASE_IMAGE=$DEBOOTSTRAP_BASE
fi

# --- The wheelhouse ------------------------------------------------------------------------------

# The project's sources alone (not build/ or egg-info left by other builds), for a clean wheel.
stage_sources() {
  local src="$scratch/src"
  rm -rf "$src"
  mkdir -p "$src"
  cp -r "$ROOT/pyproject.toml" "$ROOT/README.md" "$ROOT/contract" "$ROOT/trainer" \
    "$ROOT/operator" "$ROOT/api" "$ROOT/cli" "$src/"
  find "$src" \( -name __pycache__ -o -name '*.egg-info' \) -prune -exec rm -rf {} +
  echo "$src"
}

# fill_wheelhouse VARIANT EXTRAS [pip options...]: kuberl's wheel and its dependencies at the
# versions of requirements.lock, with pip run under `env "${pip_env[@]}"`. The dependencies are
# fetched again only when pyproject.toml, the lock or the options change.
pip_env=()
fill_wheelhouse() {
  local variant=$1 extras=$2 dir="$WHEELHOUSE/$1" src stamp
  shift 2
  src=$(stage_sources)
  stamp=$(cat "$ROOT/pyproject.toml" "$ROOT/requirements.lock" <(echo "$extras $*") \
    | sha256sum | cut -d' ' -f1)
  mkdir -p "$dir"
  rm -f "$dir"/kuberl-*.whl
  if [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "== wheelhouse $variant: kuberl's wheel (dependencies unchanged)"
    env "${pip_env[@]}" "$PYTHON" -m pip wheel --quiet --no-deps --wheel-dir "$dir" "$src"
  else
    echo "== wheelhouse $variant: kuberl[$extras] and its dependencies"
    rm -f "$dir/.stamp"
    env "${pip_env[@]}" "$PYTHON" -m pip wheel --quiet "$@" --constraint "$ROOT/requirements.lock" \
      --wheel-dir "$dir" "$src[$extras]"
    echo "$stamp" >"$dir/.stamp"
  fi
}

need_cpu=false
need_cuda=false
for image in "${images[@]}"; do
  case "$image" in trainer-cuda) need_cuda=true ;; *) need_cpu=true ;; esac
done
if $need_cpu; then
  fill_wheelhouse cpu operator,api,trainer ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"}
  # PyPI's torch for Linux is the CUDA build, which pulls gigabytes of nvidia-* wheels.
  if compgen -G "$WHEELHOUSE/cpu/nvidia_*.whl" >/dev/null; then
    rm -f "$WHEELHOUSE/cpu/.stamp"
    fail "the CPU wheelhouse got PyPI's CUDA build of torch (nvidia-* wheels in" \
      "$WHEELHOUSE/cpu): set TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu and delete them"
  fi
fi
if $need_cuda; then
  # PyPI alone, whatever this machine's pip configuration says.
  pip_env=(-u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null)
  fill_wheelhouse cuda trainer --index-url "$CUDA_INDEX_URL"
fi

# --- The images ----------------------------------------------------------------------------------

for image in "${images[@]}"; do
  case "$image" in
    trainer-cuda) target=trainer variant=cuda tag="$REGISTRY/trainer:$VERSION-cuda" ;;
    *) target=$image variant=cpu tag="$REGISTRY/$image:$VERSION" ;;
  esac
  echo "== image $tag (FROM $BASE_IMAGE)"
  started=$SECONDS
  previous=$(buildah inspect --type image --format '{{.FromImageID}}' "$tag" 2>/dev/null || true)
  # A base in buildah's storage is used as it is; a local one (localhost/) is never pulled.
  pull=false
  case "$BASE_IMAGE" in localhost/*) pull=never ;; esac
  buildah bud --quiet --pull="$pull" --file "$DOCKERFILE" --target "$target" \
    --build-arg BASE_IMAGE="$BASE_IMAGE" --build-arg COMPONENT="$target" \
    --build-arg TORCH_VARIANT="$variant" --build-arg VERSION="$VERSION" \
    --build-arg REVISION="$REVISION" --build-arg CREATED="$CREATED" --build-arg SOURCE="$SOURCE" \
    --tag "$tag" "$ROOT" >/dev/null
  # The image this one replaces, unless a container still uses it.
  if [ -n "$previous" ] && [ "$previous" != "$(buildah inspect --type image \
    --format '{{.FromImageID}}' "$tag")" ]; then
    buildah rmi "$previous" >/dev/null 2>&1 || true
  fi
  echo "   built in $((SECONDS - started)) s"
done
