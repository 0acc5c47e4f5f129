#!/usr/bin/env bash
# event_import.sh — `spikemesh data cifar10-dvs | dvs128-gesture | n-mnist | n-caltech101` on small datasets
# generated in each published binary layout by tests/ref/events_ref.py, checked
# against that file's independent numpy reference of SpikingJelly's decoding, integration,
# order and split (frames exact; resized frames against torch's interpolate):
#   imports: every dataset and format (AEDAT 2.0, AEDAT 3.1, SpikingJelly's .npz, N-MNIST and N-Caltech101
#     .bin; N-Caltech101 with and without its BACKGROUND_Google class, 180x240 frames and --size 48),
#     split by number / time / fixed duration, --size 48 (f32, u8, f16), --events, u16; recordings
#     without an event (zero frames, counted in the summary and the file's attributes); under
#     mpirun -np 2 and alone — the same bytes (crc32 attributes) whatever the rank count;
#   resume: a job killed after a round resumes from its .tmp and ends with the same file; a
#     damaged .tmp is removed and the import starts over; nothing appears under --out early;
#     SIGUSR1 (Slurm's time-limit warning) at one rank stops all after the round, exit 0;
#   bad input: one "spikemesh: error:" line naming the file or folder, a non-zero exit on every
#     rank, no --out file: missing class folders, a truncated .aedat (and --skip-bad counting it),
#     events outside the sensor, a trials list naming a missing recording, a missing label file,
#     an empty class, an existing --out, an --out the ranks do not share, a damaged .npz (bad
#     CRC-32; --skip-bad counts it once), a file-size limit (ulimit -f) hit mid-import; N-Caltech101:
#     no Caltech101 folder, an empty class, a truncated .bin, an event outside the 240x180 sensor;
#   training: a mini CIFAR10-DVS in AEDAT 3.1 imported at 48x48 and cifar10dvs_vgg trained on it
#     for 2 steps under mpirun -np 2; `data info` and `data bench` on the result.
# Usage: BIN=build/bin/spikemesh tests/e2e/event_import.sh   (needs $PY with numpy, torch, h5py)
E2E_NAME=event_import
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "$TMP" || exit 1
[ -x "$BIN" ] || { echo "event_import: $BIN not built"; echo "event_import: 0 passed, 1 failed"; exit 1; }
REF=("$PY" "$ROOT/tests/ref/events_ref.py")
MPI2=(timeout 300 mpirun --bind-to none -np 2)

"${REF[@]}" gen cifar10-dvs c10 --per-class 12 --seed 1 >/dev/null &&
  "${REF[@]}" gen cifar10-dvs c10npz --per-class 3 --seed 2 --fmt npz >/dev/null &&
  "${REF[@]}" gen cifar10-dvs c10v31 --per-class 4 --seed 3 --fmt aedat31 >/dev/null &&
  "${REF[@]}" gen dvs128-gesture gest --seed 4 >/dev/null &&
  "${REF[@]}" gen n-mnist nm --per-class 3 --seed 5 >/dev/null &&
  "${REF[@]}" gen n-caltech101 ncal --seed 6 >/dev/null &&
  "${REF[@]}" gen n-caltech101 ncalnpz --per-class 9 --seed 7 --fmt npz >/dev/null && mv ncalnpz/Caltech101 ncalnpz/events_np ||
  { bad "generate the datasets"; echo "event_import: $pass passed, $fail failed"; exit 1; }

# import_ok NAME DATASET DIR NP ARGS...: imports into NAME.h5 and compares with the reference.
import_ok() {
  local name=$1 ds=$2 dir=$3 np=$4 a check_args=()
  shift 4
  for a in "$@"; do [ "$a" = --include-background ] && check_args+=(--include-background); done
  local run=("$BIN")
  [ "$np" -gt 1 ] && run=(timeout 300 mpirun --bind-to none -np "$np" "$BIN")
  if ! "${run[@]}" data "$ds" --from "$dir" --out "$name.h5" "$@" >"$name.log" 2>&1; then
    bad "$name: import failed"; tail -n 4 "$name.log" | sed 's/^/       /'; return
  fi
  if "${REF[@]}" check "$ds" "$dir" "$name.h5" "${check_args[@]}" >"$name.check" 2>&1; then
    ok "$name: equals the reference ($(tail -n 1 "$name.check"))"
  else bad "$name: differs from the reference"; grep -v '^ok' "$name.check" | head -n 5 | sed 's/^/       /'; fi
}

import_ok c10_np2 cifar10-dvs c10 2 --files-per-round 5
import_ok c10_np1 cifar10-dvs c10 1
crcs() { "$PY" -c "import h5py,sys; f=h5py.File(sys.argv[1]); print([int(f[d].attrs['crc32']) for d in ('train/x','train/y','test/x','test/y')])" "$1"; }
[ "$(crcs c10_np2.h5)" = "$(crcs c10_np1.h5)" ] && ok "np 2 and np 1 write the same data ($(crcs c10_np1.h5))" ||
  bad "np 2 and np 1 differ: $(crcs c10_np2.h5) vs $(crcs c10_np1.h5)"
import_ok c10_time cifar10-dvs c10 2 --split-by time --T 8
import_ok c10_duration cifar10-dvs c10 1 --duration-us 20000 --T 6
import_ok c10_48 cifar10-dvs c10 2 --size 48 --events
import_ok c10_48_u8 cifar10-dvs c10 1 --size 48 --dtype u8 --deflate 0
import_ok c10_48_f16 cifar10-dvs c10 1 --size 48 --dtype f16
import_ok c10_npz cifar10-dvs c10npz 2 --train-ratio 0.5
import_ok c10_aedat31 cifar10-dvs c10v31 1 --T 4
import_ok gesture dvs128-gesture gest 2 --events --T 12
import_ok gesture_time dvs128-gesture gest 1 --split-by time --dtype u16
import_ok gesture_duration dvs128-gesture gest 1 --duration-us 30000 --T 6
import_ok nmnist n-mnist nm 2 --events
# N-Caltech101: --from the folder above Caltech101 / SpikingJelly's root above events_np, or the folder itself
import_ok ncal n-caltech101 ncal 2 --events
import_ok ncal_bg n-caltech101 ncal/Caltech101 1 --include-background --train-ratio 0.75
import_ok ncal_48 n-caltech101 ncal 2 --size 48 --include-background
import_ok ncal_time n-caltech101 ncal 1 --split-by time --T 6 --dtype u16
import_ok ncal_npz n-caltech101 ncalnpz 1 --duration-us 40000 --T 5
if "$PY" - <<'EOF' >ncal_classes.log 2>&1
import h5py
with h5py.File("ncal.h5") as f, h5py.File("ncal_bg.h5") as g:
    a, b = f.attrs["class_names"].split(","), g.attrs["class_names"].split(",")
    assert b[0] == "BACKGROUND_Google" and a == b[1:] and len(a) == 5, (a, b)
    assert f["train/x"].shape[3:] == (180, 240) and f.attrs["size"] == 0, f["train/x"].shape
    assert (f.attrs["frame_h"], f.attrs["frame_w"]) == (180, 240)
print("ok")
EOF
then ok "n-caltech101: 5 classes without BACKGROUND_Google, 6 with it (label 0); [T, 2, 180, 240] frames"
else bad "n-caltech101 classes"; tail -n 3 ncal_classes.log | sed 's/^/       /'; fi

# recordings without an event: zero frames as SpikingJelly, counted and named, never silently
cp -r nm nm_empty && e_train=$(ls nm_empty/Train/3/* | head -n 1) && e_test=$(ls nm_empty/Test/5/* | head -n 1) &&
  : >"$e_train" && : >"$e_test"
if "${MPI2[@]}" "$BIN" data n-mnist --from nm_empty --out nm_empty.h5 >empty.log 2>&1 &&
   grep -q "2 recording(s) without an event (1 train, 1 test) imported as zero frames" empty.log &&
   "$PY" - "${e_train#nm_empty/}" "${e_test#nm_empty/}" <<'EOF' >empty_check.log 2>&1
import sys, h5py, numpy as np
with h5py.File("nm_empty.h5") as f, h5py.File("nmnist.h5") as g:
    a = dict(f.attrs)
    assert int(a["train_empty_samples"]) == 1 and int(a["test_empty_samples"]) == 1, a
    names = a["empty_samples"].split("\n")
    assert sys.argv[1] in names and sys.argv[2] in names, names
    for s in ("train", "test"):
        x, ref = f[s + "/x"][()], g[s + "/x"][()]
        zero = [i for i in range(len(x)) if not x[i].any()]
        assert len(zero) == 1, (s, zero)
        keep = [i for i in range(len(x)) if i != zero[0]]
        assert (x[keep] == ref[keep]).all(), s  # every other sample as imported from the intact files
    assert int(g.attrs["train_empty_samples"]) == 0
print("ok")
EOF
then ok "recordings without an event: zero frames, counted (train_empty_samples, test_empty_samples) and named"
else bad "empty recordings"; tail -n 3 empty.log empty_check.log | sed 's/^/       /'; fi

# ---- resume ------------------------------------------------------------------------------------
SPIKEMESH_TEST_KILL_AFTER_ROUND=3 "${MPI2[@]}" "$BIN" data cifar10-dvs --from c10 --out resumed.h5 \
  --files-per-round 4 >kill.log 2>&1
if [ -f resumed.h5.tmp ] && [ ! -e resumed.h5 ]; then ok "a killed import leaves only resumed.h5.tmp"
else bad "after the kill: $(ls resumed.h5* 2>&1 | tr '\n' ' ')"; fi
"$BIN" data cifar10-dvs --from c10 --out resumed.h5 --files-per-round 5 >resume.log 2>&1
if grep -q "resuming the interrupted import in resumed.h5.tmp: 24 samples of the first 24 files" resume.log &&
  [ "$(crcs resumed.h5)" = "$(crcs c10_np1.h5)" ] && [ ! -e resumed.h5.tmp ]; then
  ok "the rerun (1 rank, other rounds) resumes after the 24 files of 3 rounds at 2 ranks and writes the same data"
else bad "resume"; tail -n 3 resume.log | sed 's/^/       /'; fi
SPIKEMESH_TEST_KILL_AFTER_ROUND=2 "$BIN" data cifar10-dvs --from c10 --out damaged.h5 --files-per-round 8 >kill2.log 2>&1
head -c 3000 damaged.h5.tmp >cut && mv cut damaged.h5.tmp
"$BIN" data cifar10-dvs --from c10 --out damaged.h5 --files-per-round 8 >restart.log 2>&1
if grep -q "removing it and starting over" restart.log && [ "$(crcs damaged.h5)" = "$(crcs c10_np1.h5)" ]; then
  ok "a damaged .tmp is removed and the import starts over"
else bad "damaged .tmp"; tail -n 3 restart.log | sed 's/^/       /'; fi
SPIKEMESH_TEST_KILL_AFTER_ROUND=1 "$BIN" data cifar10-dvs --from c10 --out other.h5 --files-per-round 8 >kill3.log 2>&1
"$BIN" data cifar10-dvs --from c10 --out other.h5 --files-per-round 8 --T 4 >other.log 2>&1
grep -q "made with other options" other.log && "${REF[@]}" check cifar10-dvs c10 other.h5 >/dev/null 2>&1 &&
  ok "a .tmp of other options is not resumed" || bad "a .tmp of other options"

SPIKEMESH_TEST_SIGNAL_AFTER_ROUND=2 "${MPI2[@]}" "$BIN" data cifar10-dvs --from c10 --out signalled.h5 \
  --files-per-round 4 >sig.log 2>&1
rc=$?
"${MPI2[@]}" "$BIN" data cifar10-dvs --from c10 --out signalled.h5 --files-per-round 4 >sig2.log 2>&1
if [ "$rc" -eq 0 ] && grep -q "import stopped by a signal after 16 samples" sig.log && grep -q "resuming" sig2.log &&
  [ "$(crcs signalled.h5)" = "$(crcs c10_np1.h5)" ]; then ok "SIGUSR1 at one rank stops every rank after the round (exit 0); the rerun resumes"
else bad "signal: exit $rc"; tail -n 2 sig.log sig2.log | sed 's/^/       /'; fi

# ---- bad input ---------------------------------------------------------------------------------
mkdir -p nocls/airplane && expect_error "missing class folders" "nocls" "automobile" "airplane" -- \
  "${MPI2[@]}" "$BIN" data cifar10-dvs --from nocls --out x.h5
cp -r c10 trunc && head -c 1001 c10/cat/cifar10_cat_3.aedat >trunc/cat/cifar10_cat_3.aedat
expect_error "truncated .aedat" "cifar10_cat_3.aedat" "truncated" "--skip-bad" -- \
  "${MPI2[@]}" "$BIN" data cifar10-dvs --from trunc --out x.h5
[ ! -e x.h5 ] && [ ! -e x.h5.tmp ] && ok "nothing left after the refusal" || bad "files left: $(ls x.h5* 2>&1)"
if "${MPI2[@]}" "$BIN" data cifar10-dvs --from trunc --out skip.h5 --skip-bad >skip.log 2>&1 &&
  grep -q "1 sample(s) skipped" skip.log &&
  [ "$("$PY" -c "import h5py; f=h5py.File('skip.h5'); print(f.attrs['skipped_samples'], len(f['train/y'])+len(f['test/y']))")" = "1 119" ]
then ok "--skip-bad skips and counts the truncated file"; else bad "--skip-bad"; tail -n 3 skip.log; fi
cp -r c10npz badcrc && "$PY" - badcrc/cat/cifar10_cat_1.npz <<'PYEOF2'
import sys, zipfile
p = sys.argv[1]  # rewrite as stored (uncompressed) members, then flip one bit of x.npy's data
with zipfile.ZipFile(p) as z:
    members = {n: z.read(n) for n in z.namelist()}
with zipfile.ZipFile(p, "w", zipfile.ZIP_STORED) as z:
    for n, b in members.items(): z.writestr(n, b)
b = bytearray(open(p, "rb").read())
i = b.index(b"x.npy") + len(b"x.npy") + 140
b[i] ^= 0x10
open(p, "wb").write(b)
PYEOF2
expect_error "a bad CRC-32 in an .npz member" "cifar10_cat_1.npz" "CRC-32" -- \
  "$BIN" data cifar10-dvs --from badcrc --out x.h5
if "$BIN" data cifar10-dvs --from badcrc --out badcrc.h5 --skip-bad >badcrc.log 2>&1 &&
  grep -q "^warning: 1 sample(s) skipped" badcrc.log && [ "$("$PY" -c "import h5py; f=h5py.File('badcrc.h5'); \
  print(f.attrs['skipped_samples'], len(f['train/y']) + len(f['test/y']))")" = "1 29" ]; then
  ok "--skip-bad counts the damaged .npz once (29 of 30 samples)"
else bad "--skip-bad on a damaged .npz"; tail -n 3 badcrc.log; fi
cp -r c10 notaedat && printf 'PK\003\004 not an aedat' >notaedat/dog/cifar10_dog_0.aedat
expect_error "not an AEDAT file" "cifar10_dog_0.aedat" "not an AEDAT" -- "$BIN" data cifar10-dvs --from notaedat --out x.h5
cp -r gest offsensor && "$PY" - offsensor/user01_led.aedat <<'EOF'
import sys
p = sys.argv[1]; b = bytearray(open(p, 'rb').read())
i = b.index(b'#!END-HEADER\r\n') + len(b'#!END-HEADER\r\n')
while True:  # the first polarity packet's first event: x = 200
    typ = int.from_bytes(b[i:i+2], 'little'); size = int.from_bytes(b[i+4:i+8], 'little'); cap = int.from_bytes(b[i+16:i+20], 'little')
    if typ == 1 and cap:
        w = int.from_bytes(b[i+28:i+32], 'little'); w = (w & 0x1FFFF) | (200 << 17); b[i+28:i+32] = w.to_bytes(4, 'little'); break
    i += 28 + cap * size
open(p, 'wb').write(b)
EOF
expect_error "events outside the sensor" "user01_led.aedat" "outside the 128x128 sensor" -- \
  "${MPI2[@]}" "$BIN" data dvs128-gesture --from offsensor --out x.h5
cp -r gest nofile && echo "user09_led.aedat" >>nofile/trials_to_train.txt
expect_error "trials list names a missing recording" "trials_to_train.txt" "user09_led.aedat" -- \
  "$BIN" data dvs128-gesture --from nofile --out x.h5
cp -r gest nocsv && rm nocsv/user02_led_labels.csv
expect_error "missing label file" "user02_led_labels.csv" -- "$BIN" data dvs128-gesture --from nocsv --out x.h5
cp -r nm emptycls && rm emptycls/Train/7/*
expect_error "empty class" "Train/7" "empty class" -- "${MPI2[@]}" "$BIN" data n-mnist --from emptycls --out x.h5
mkdir -p nocal/Caltech101_annotations/accordion && : >nocal/Caltech101_annotations/accordion/annotation_0001.mat
expect_error "n-caltech101 without a Caltech101 folder" "nocal" "expected N-Caltech101's Caltech101 folder" -- \
  "${MPI2[@]}" "$BIN" data n-caltech101 --from nocal --out x.h5
cp -r ncal ncal_emptycls && rm ncal_emptycls/Caltech101/Leopards/*
expect_error "n-caltech101 empty class" "Caltech101/Leopards" "empty class" -- \
  "$BIN" data n-caltech101 --from ncal_emptycls --out x.h5
cp -r ncal ncal_trunc && head -c 1003 ncal/Caltech101/anchor/image_0002.bin >ncal_trunc/Caltech101/anchor/image_0002.bin
expect_error "n-caltech101 truncated .bin" "anchor/image_0002.bin" "truncated" "1003 bytes" -- \
  "${MPI2[@]}" "$BIN" data n-caltech101 --from ncal_trunc --out x.h5
cp -r ncal ncal_off && "$PY" - ncal_off/Caltech101/accordion/image_0003.bin <<'EOF'
import sys
p = sys.argv[1]; b = bytearray(open(p, 'rb').read())
b[5 * 7 + 1] = 180  # event 7: y = 180, one row below the 180-row sensor (x and y are 8 bits)
open(p, 'wb').write(b)
EOF
expect_error "n-caltech101 event outside the sensor" "accordion/image_0003.bin" "event 7" "outside the 240x180 sensor" -- \
  "$BIN" data n-caltech101 --from ncal_off --out x.h5
[ ! -e x.h5 ] && [ ! -e x.h5.tmp ] && ok "n-caltech101: nothing left after the refusals" || bad "files left: $(ls x.h5* 2>&1)"
mkdir -p cwd0 cwd1  # a relative --out in another working directory per rank: as node-local storage
# shellcheck disable=SC2016  # $OMPI_COMM_WORLD_RANK expands in each rank's shell
expect_error "--out not shared by the ranks" "--out" "shares" -- "${MPI2[@]}" bash -c \
  'cd cwd$OMPI_COMM_WORLD_RANK && exec "$0" data cifar10-dvs --from "$1" --out rel.h5' "$BIN" "$PWD/c10"
[ ! -e cwd0/rel.h5.tmp ] && [ ! -e cwd0/rel.h5 ] && [ ! -e cwd1/rel.h5 ] && ok "nothing left in either folder" ||
  bad "left: $(ls cwd0 cwd1)"
expect_error "existing --out" "c10_np1.h5" "--overwrite" -- "$BIN" data cifar10-dvs --from c10 --out c10_np1.h5
# A file-size limit below the uncompressed file (120 x 320 KiB) but above what MPI start-up writes.
# shellcheck disable=SC2016  # $1/$@ expand in the inner shell
expect_error "file-size limit" "ulimit -f" "resume" -- \
  bash -c 'trap "" XFSZ; ulimit -f 20000; exec "$@"' _ "$BIN" data cifar10-dvs --from c10 --out full.h5 --deflate 0 \
  --files-per-round 4
[ -f full.h5.tmp ] && [ ! -e full.h5 ] && ok "the limit keeps the finished rounds in full.h5.tmp" || bad "after the limit: $(ls full.h5* 2>&1)"
"$BIN" data cifar10-dvs --from c10 --out full.h5 --deflate 0 --files-per-round 4 >full.log 2>&1 &&
  grep -q "resuming" full.log && "${REF[@]}" check cifar10-dvs c10 full.h5 >/dev/null 2>&1 &&
  ok "without the limit the same command resumes and completes" || bad "resume after the limit"

# ---- training on an import, info, bench -------------------------------------------------------
if "${MPI2[@]}" "$BIN" data cifar10-dvs --from c10v31 --out mini48.h5 --size 48 >mini.log 2>&1 &&
  "${MPI2[@]}" "$BIN" train --model cifar10dvs_vgg --data mini48.h5 --T 10 --batch-size 4 --max-steps 2 \
    --distributed-mode dp --optimizer sgd --lr 0.1 --momentum 0.9 --device cpu --output runs --run-name mini \
    >train.log 2>&1 && grep -q "done: 2 steps" train.log; then
  ok "cifar10dvs_vgg trains 2 steps on an imported AEDAT 3.1 mini CIFAR10-DVS under mpirun -np 2"
else bad "training on the import"; tail -n 4 mini.log train.log | sed 's/^/       /'; fi
if "$BIN" data info c10_48.h5 >info.log 2>&1 && grep -q "class_names: airplane,automobile" info.log &&
  grep -q "checksum: crc32 train/x" info.log && grep -q "stored f32" info.log; then ok "data info prints the attributes"
else bad "data info"; cat info.log | head -n 8; fi
cp c10_np1.h5 damaged_data.h5 && "$PY" -c "import h5py; f=h5py.File('damaged_data.h5','r+'); f['test/x'][3,2,1,5,7] ^= 1"
if "$BIN" data info c10_np1.h5 --verify >verify.log 2>&1 && [ "$(grep -c ': crc32 [0-9a-f]* ok' verify.log)" = 4 ]; then
  ok "data info --verify: the four crc32s match"; else bad "data info --verify"; tail -n 4 verify.log; fi
expect_error "a changed value fails --verify" "damaged_data.h5" "crc32" -- "$BIN" data info damaged_data.h5 --verify
grep -q "/test/x: crc32 expected" err.log out.log && ok "--verify names /test/x" || bad "--verify names the dataset"
if "${MPI2[@]}" "$BIN" data bench c10_np1.h5 --batch-size 4 --batches 10 --step-ms 1000 >bench.log 2>&1 &&
  grep -q "samples/s per rank" bench.log; then ok "data bench: $(grep -m1 'prefetch' bench.log | tr -s ' ')"
else bad "data bench"; tail -n 3 bench.log; fi

echo "event_import: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
