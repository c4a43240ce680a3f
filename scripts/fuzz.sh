#!/usr/bin/env bash
# Fuzzes the peer-input parsers (docs/reliability.md, "Fuzzing"): runs each cargo-fuzz target
# (fuzz/fuzz_targets) for SECONDS on one core and prints its executions, rate and findings.
#   scripts/fuzz.sh SECONDS [--update-corpus]
# Inputs the run finds are kept in target/fuzz-corpus/<target> (seeded from the committed
# fuzz/corpus/<target>); --update-corpus merges the ones that add coverage into fuzz/corpus
# (libFuzzer -merge=1), which the stable test crates/roam/tests/fuzz_corpus.rs replays in CI.
# A finding is written to fuzz/artifacts/<target>/ and makes the script fail; add it to the
# corpus and a regression test once fixed. Needs the nightly toolchain and cargo-fuzz, which
# it installs if missing. FUZZ_TARGETS="frame" runs only the targets named.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:?usage: scripts/fuzz.sh SECONDS [--update-corpus]}
update=${2:-}
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1}
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
root=$PWD
findings=0
for target in ${FUZZ_TARGETS:-frame handshake}; do
  (cd fuzz && cargo +nightly fuzz build -O --debug-assertions "$target")
  work="$root/target/fuzz-corpus/$target"
  mkdir -p "$work" "fuzz/corpus/$target" "fuzz/artifacts/$target"
  cp -n fuzz/corpus/"$target"/* "$work"/ 2>/dev/null || true
  log="$root/target/fuzz-$target.log"
  bin="fuzz/target/x86_64-unknown-linux-gnu/release/$target"
  # 256 MiB per allocation: a peer-announced length that is allocated before its bytes arrive
  # is a finding (the real limits would let it reach 1 GiB); 5 s per input: a hang.
  set +e
  # -max_len: inputs of up to 16 KiB (frames of up to ~2,000 keys) keep the corpus small.
  "$bin" "$work" -max_total_time="$secs" -max_len=16384 -malloc_limit_mb=256 -rss_limit_mb=2048 -timeout=5 \
    -print_final_stats=1 -artifact_prefix="fuzz/artifacts/$target/" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(grep -ao 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -ao '[0-9]*$' || echo 0)
  rate=$(grep -ao 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -ao '[0-9]*$' || echo 0)
  found=$(find "fuzz/artifacts/$target" -type f | wc -l)
  echo "$target: $execs executions in ${secs} s ($rate exec/s), corpus $(ls "$work" | wc -l) inputs, exit $rc, $found finding(s) in fuzz/artifacts/$target"
  if [ "$rc" -ne 0 ]; then
    grep -aE 'ERROR|SUMMARY|panicked' "$log" | head -5 || true
    findings=$((findings + 1))
  fi
  if [ "$update" = "--update-corpus" ]; then
    "$bin" -merge=1 -max_len=16384 "fuzz/corpus/$target" "$work" >>"$log" 2>&1
    echo "$target: fuzz/corpus/$target now $(ls "fuzz/corpus/$target" | wc -l) inputs, $(du -sh "fuzz/corpus/$target" | cut -f1)"
  fi
done
[ "$findings" -eq 0 ]
