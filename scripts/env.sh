# Shared build environment for the project's scripts (sourced, not run).
# One target directory outside the clone, reused by the demo, the tests and CI,
# so DataFusion is compiled once per machine rather than once per checkout.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tessera/target}"
# mold links the large DataFusion binaries several times faster than ld.bfd.
if command -v mold >/dev/null 2>&1; then
  export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C link-arg=-fuse-ld=mold"
fi
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
