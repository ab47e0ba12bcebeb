# Sourced by fuzz/ci.sh and fuzz/run.sh: defines `fuzz`, which runs
# cargo-fuzz with a toolchain that takes its -Z flags (sanitizer, sancov):
# nightly where it is installed, else stable with RUSTC_BOOTSTRAP=1, which
# accepts them as nightly does.
if rustup toolchain list | grep -q '^nightly'; then
    fuzz() { cargo +nightly fuzz "$@"; }
else
    echo "fuzz: no nightly toolchain, using stable rustc with RUSTC_BOOTSTRAP=1" >&2
    fuzz() { RUSTC_BOOTSTRAP=1 cargo fuzz "$@"; }
fi
