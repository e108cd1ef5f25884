#!/usr/bin/env bash
# Cross-builds ferry's kernel-level unit tests for aarch64 and runs them under qemu-aarch64, so
# the NEON kernels (src/kernels/cpu/neon_kernels.cpp, attention_neon.cpp) are checked on an x86
# machine. Not part of CI: emulation makes it slow, and its timings mean nothing.
#
#   scripts/check-neon.sh            build, then run the kernel suites (Kernels, PagedAttention,
#                                    FerryTypes, KvQuant; a few minutes) as:
#       neon                 at the neon level (the default on ARM); the kernel tests run every
#                            activation mode (f32, int16, int8) themselves
#       scalar               with FERRY_CPU_LEVEL=scalar (tests that pick their levels still
#                            run NEON too; the others run the scalar reference)
#       neon-dotprod         neon_kernels.cpp built for armv8.2-a+dotprod (SDOT in the
#                            integer products)
#   scripts/check-neon.sh --model    also the suites that run the default model (GoldenModel,
#                                    GoldenGreedy, DispatchLogits, KvQuantModel,
#                                    FerryTypes.DefaultModel*) at the neon and scalar levels: an
#                                    hour or more under qemu
#   scripts/check-neon.sh [--model] -- ARGS   ARGS (e.g. --gtest_filter=...) go to every run
#
# Installs what it needs on Debian (the cross compiler, qemu-user, the :arm64 -dev packages, and
# the arm64 architecture in dpkg); idempotent. The build is cached in $BUILD_DIR (default
# .cache/build-neon) and only what changed is rebuilt. Model tests skip without the default
# model (scripts/get-model.sh). Prints a summary line per run; exits non-zero if any run fails.
# Full logs: $BUILD_DIR/<run>.log.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="${BUILD_DIR:-$root/.cache/build-neon}"
jobs="${JOBS:-$(nproc)}"
model=0
if [ "${1:-}" = "--model" ]; then
    model=1
    shift
fi
gtest_args=()
if [ "${1:-}" = "--" ]; then
    shift
    gtest_args=("$@")
fi

# ---- toolchain ------------------------------------------------------------------------------
host_pkgs=(g++-aarch64-linux-gnu qemu-user cmake make pkg-config nlohmann-json3-dev libboost-dev
           libcli11-dev)
arm_pkgs=(libgtest-dev:arm64 libfmt-dev:arm64 libpcre2-dev:arm64 libedit-dev:arm64)
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=()
for p in "${host_pkgs[@]}" "${arm_pkgs[@]}"; do installed "$p" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "check-neon: installing ${missing[*]}" >&2
    dpkg --print-foreign-architectures | grep -qx arm64 || $sudo dpkg --add-architecture arm64
    $sudo apt-get update -q >&2
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        "${missing[@]}" >&2
fi

# ---- build ----------------------------------------------------------------------------------
# A small project around ferry_lib with the unit tests that exercise the kernel levels (the rest
# of tests/unit is not needed here, and not all of it builds with GCC 12 for aarch64), linked
# twice: with the baseline NEON kernels, and with neon_kernels.cpp built for SDOT. That second
# object defines everything the archive's copy does, so the linker never pulls the copy in.
tests=(test_kernels test_paged_attention test_ferry_types test_kv_quant test_dispatch_logits
       test_golden_model)
# shellcheck disable=SC2016 # ${FERRY_ROOT} is for CMake to expand
sources=$(printf ' ${FERRY_ROOT}/tests/unit/%s.cpp' "${tests[@]}")
mkdir -p "$build/project"
cat >"$build/project/CMakeLists.txt.new" <<EOF
cmake_minimum_required(VERSION 3.20)
project(ferry_neon_check C CXX)
set(CMAKE_CXX_STANDARD 20)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_CXX_EXTENSIONS OFF)
add_compile_options(-Wall -Wextra -ffp-contract=off)
add_subdirectory(\${FERRY_ROOT} ferry)
find_package(GTest REQUIRED)
add_library(neon_check_tests OBJECT$sources)
target_link_libraries(neon_check_tests PRIVATE ferry_lib GTest::gtest)
target_compile_definitions(neon_check_tests PRIVATE FERRY_SOURCE_DIR="\${FERRY_ROOT}")
add_library(neon_dotprod OBJECT \${FERRY_ROOT}/src/kernels/cpu/neon_kernels.cpp)
target_compile_options(neon_dotprod PRIVATE -march=armv8.2-a+dotprod)
target_link_libraries(neon_dotprod PRIVATE ferry_lib)
add_executable(neon_tests \$<TARGET_OBJECTS:neon_check_tests>)
add_executable(neon_tests_dotprod
  \$<TARGET_OBJECTS:neon_check_tests> \$<TARGET_OBJECTS:neon_dotprod>)
foreach(t neon_tests neon_tests_dotprod)
  target_link_libraries(\${t} PRIVATE ferry_lib GTest::gtest GTest::gtest_main)
endforeach()
EOF
# Replaced only when it changes, so a rerun rebuilds only what changed in the tree.
if cmp -s "$build/project/CMakeLists.txt.new" "$build/project/CMakeLists.txt"; then
    rm "$build/project/CMakeLists.txt.new"
else
    mv "$build/project/CMakeLists.txt.new" "$build/project/CMakeLists.txt"
fi
cmake -S "$build/project" -B "$build" -DFERRY_ROOT="$root" \
    -DCMAKE_TOOLCHAIN_FILE="$root/cmake/aarch64-linux-gnu.cmake" -DCMAKE_BUILD_TYPE=Release \
    -DFERRY_BUILD_TESTS=OFF -DFERRY_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j "$jobs" --target neon_tests neon_tests_dotprod

# ---- run ------------------------------------------------------------------------------------
# The loader, libc and libstdc++ come from the :arm64 packages installed above. Not
# -L /usr/aarch64-linux-gnu: that loader is the cross toolchain's build of glibc, it then loads
# the multiarch libc.so.6 (another build), and pthread_create spins forever.
qemu=(qemu-aarch64)
export FERRY_SOURCE_DIR="$root"
kernel_suites='Kernels.*:PagedAttention.*:FerryTypes.*:KvQuant.*-FerryTypes.DefaultModel*'
# Parameterized suites carry their instantiation's prefix (Activations/GoldenModel.X/int16).
model_suites='*GoldenModel.*:*GoldenGreedy.*:*DispatchLogits.*:KvQuantModel.*:FerryTypes.DefaultModel*'
failed=0
summary=()
# run NAME BINARY [VAR=VALUE ...] [-- GTEST_ARGS...]: one test run under qemu, counted for the
# summary.
run() {
    local name=$1 bin=$2
    shift 2
    local vars=() args=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
        vars+=("$1")
        shift
    done
    if [ $# -gt 0 ]; then
        shift
        args=("$@")
    fi
    local log="$build/$name.log" rc=0 start=$SECONDS
    echo "check-neon: $name ..." >&2
    env "${vars[@]}" "${qemu[@]}" "$build/$bin" "${args[@]}" "${gtest_args[@]}" >"$log" 2>&1 ||
        rc=$?
    local passed failed_n skipped
    passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
    failed_n=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
    skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
    summary+=("$(printf '%-20s %s passed, %s failed, %s skipped (%d s)' "$name:" "${passed:-0}" \
        "${failed_n:-0}" "${skipped:-0}" $((SECONDS - start)))")
    if [ "$rc" -ne 0 ]; then
        failed=1
        grep -E '^\[  FAILED  \]|Failure$' "$log" | head -20 >&2 || true
        echo "check-neon: $name failed (exit $rc), log: $log" >&2
    fi
}
k=--gtest_filter="$kernel_suites"
run neon neon_tests FERRY_CPU_LEVEL=neon -- "$k"
run scalar neon_tests FERRY_CPU_LEVEL=scalar -- "$k"
run neon-dotprod neon_tests_dotprod FERRY_CPU_LEVEL=neon -- "$k"
if [ "$model" = 1 ]; then
    m=--gtest_filter="$model_suites"
    run neon-model neon_tests FERRY_CPU_LEVEL=neon -- "$m"
    run scalar-model neon_tests FERRY_CPU_LEVEL=scalar -- "$m"
fi

printf '%s\n' "${summary[@]}"
exit "$failed"
