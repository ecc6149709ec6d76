#!/bin/sh
# deps.sh — installs the Debian packages heed needs that are missing.
#   scripts/deps.sh          generator, kernels and tests (clang: make test-clang;
#                            qemu-user: make test-runtime-isa; the aarch64 cross
#                            compiler and qemu-user: make test-neon; cmake, ninja-build,
#                            meson: make test-consumers; python3-numpy: make test-python; GNU parallel,
#                            slurm-wlm and munge: make test-campaign, which starts
#                            its own one-node Slurm cluster)
#   scripts/deps.sh bench    also the benchmark peers (OpenBLAS, oneDNN)
#   scripts/deps.sh fuzz     also libFuzzer (make fuzz)
#   scripts/deps.sh torch    also Debian's PyTorch and torchvision (make test-python: heed.torch,
#                            ViT-B/16 with heed's attention; make bench-models)
set -e
pkgs="gcc clang make pkg-config lua5.4 luajit lua-lpeg lua-penlight lua-argparse lua-dkjson libcriterion-dev liblua5.4-dev
      qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross cmake ninja-build meson python3-numpy
      parallel slurm-wlm munge"
[ "${1:-}" = "bench" ] && pkgs="$pkgs libopenblas-dev libdnnl-dev"
[ "${1:-}" = "fuzz" ] && pkgs="$pkgs libclang-rt-14-dev"
[ "${1:-}" = "torch" ] && pkgs="$pkgs python3-torch python3-torchvision"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "deps: installing$missing"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo=sudo
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null
