#!/bin/sh
# Build the real R-Type server (MIAOU-TYPE/rtype, tag v1.49.0) from a checkout of its source,
# without its CMake (which fetches vcpkg from the network): g++ and Debian's nlohmann-json.
#
#   apt-get install -y g++ nlohmann-json3-dev
#   tests/peers/rtype-implementation/build_real_server.sh /path/to/rtype-checkout OUTDIR
#   (cd OUTDIR && ./r-type_server --port 8080)     # TCP 8080, UDP 8081
#
# It needs ./libraries/libNetPluginLib.so and ./levels/level1.json beside where it runs;
# both are put in OUTDIR. Slow (a few minutes on two cores): not part of CI.
set -eu
src=$(cd "$1" && pwd)
out=$2
mkdir -p "$out/libraries" "$out/levels"
cxx="${CXX:-g++} -std=c++20 -O1 -w"
incs=$(find "$src/server/src" "$src/shared" -type d -not -path '*/tests*' | sed 's/^/-I/')
$cxx -shared -fPIC $incs "$src/shared/NetWrapper/Plugin/src/NetPlugin.cpp" \
    -o "$out/libraries/libNetPluginLib.so"
files=$(find "$src/server/src" "$src/shared" -name '*.cpp' \
    -not -path '*/tests/*' -not -path '*/Plugin/*' -not -name 'WinHandler.cpp')
$cxx $incs $files -o "$out/r-type_server" -ldl -lpthread
cp "$src/levels/level1.json" "$out/levels/"
echo "built $out/r-type_server"
