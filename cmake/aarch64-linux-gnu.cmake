# Cross-compiles for 64-bit ARM Linux with Debian's cross toolchain (g++-aarch64-linux-gnu) and
# the multiarch :arm64 library packages; scripts/check-neon.sh builds with it and runs the tests
# under qemu-aarch64.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Multiarch: :arm64 libraries and their CMake packages are under /usr/lib/aarch64-linux-gnu,
# headers and architecture-independent packages (nlohmann_json, CLI11, Boost) are shared in
# /usr, so no sysroot; this keeps the searches away from /usr/lib/x86_64-linux-gnu.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
# Built test binaries run through qemu (gtest_discover_tests and ctest use this). Not with
# -L /usr/aarch64-linux-gnu: that loader would pick up the multiarch libc6:arm64 (a different
# build of glibc than the cross one) and pthread_create then spins forever; without -L, the
# loader, libc and libstdc++ all come from the :arm64 packages.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
