# Shared build environment for the project's scripts (sourced, not run).
# Source it after scripts/setup.sh: the linker flags depend on whether mold is
# installed, and a change of flags recompiles all of DataFusion.
_tessera_repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# One target directory outside the clone, reused by the demo, the tests, the
# wheel and CI, so DataFusion is compiled once per machine rather than once
# per checkout.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tessera/target}"
# mold links the large DataFusion binaries several times faster than ld.bfd.
# Decided here, every time, from what is installed now: the same machine gives
# the same flags to every script.
if command -v mold >/dev/null 2>&1; then
  export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C link-arg=-fuse-ld=mold"
else
  unset CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS
fi
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

# The project's virtual environment (made by scripts/setup.sh), first on PATH:
# its python, pip, maturin, pytest and the installed `tessera` command.
export TESSERA_VENV="${TESSERA_VENV:-$_tessera_repo/.venv}"
if [[ -x "$TESSERA_VENV/bin/python" ]]; then
  case ":$PATH:" in
    *":$TESSERA_VENV/bin:"*) ;;
    *) export PATH="$TESSERA_VENV/bin:$PATH" ;;
  esac
fi
unset _tessera_repo
