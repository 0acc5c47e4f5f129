#!/usr/bin/python3
"""compare.py — spikemesh against PyTorch, per configuration, from a JSONL benchmark log.

Reads the records that `spikemesh bench --result-log FILE` and bench/torch_bench.py
--result-log FILE append, groups them by configuration ignoring the backend, and prints for
each configuration the latest spikemesh record next to the latest pytorch record: samples/s,
median step latency, peak memory, and the ratios spikemesh/pytorch.

A configuration is the set of configuration fields (the list below mirrors
bench_config_fields() in src/io/bench_record.cpp) except "backend" and "compile" (a PyTorch-only
knob; eager and compiled PyTorch runs are shown as separate rows). A spikemesh and a pytorch
configuration pair up when every configuration field that both records set is equal; a field
only one side sets (torch_bench.py does not write pipeline or mesh fields) does not prevent a pair.

Peak memory: torch.cuda.max_memory_allocated-style "peak_allocated_mb" on CUDA, "peak_rss_mb"
(process peak resident set) on CPU, where PyTorch has no allocator statistics.

    /usr/bin/python3 bench/compare.py results/bench.jsonl
Exit status: 0 when at least one spikemesh/pytorch pair was printed, 1 otherwise.

--all: every system per configuration (spikemesh, the PyTorch twin and SpikingJelly, eager and
torch.compile), one line each with spikemesh's speed-up and memory ratio against it and the GPU
numerics it ran with (convolution policy; fp32 precision of convolutions and matrix products);
the GPU procedure (scripts/gpu_check.sh) prints this. Exit status 0 when any record was printed.

fp32 on a GPU: conv_fp32_precision / matmul_fp32_precision ("ieee" | "tf32") are part of the
configuration; records without them count as a peer's "tf32" switch says (both) or, for
spikemesh, as IEEE. A peer pairs with a spikemesh run of the same convolution precision (its
matrix-product precision is shown, not matched: a TF32 peer sets both).
"""
import argparse
import json
import sys

CONFIG_FIELDS = [
    "benchmark_regime", "model", "mode", "prefer", "world_size", "optimizer_sharding",
    "memopt_level", "batch_size", "global_batch_size", "per_rank_batch_size", "data_replicas",
    "num_classes", "T", "steps", "warmup", "image_size", "mesh_shape", "tp_mesh_dim",
    "dp_mesh_dim", "memopt_compress_x", "pp_microbatches", "pp_memopt_stage_budget_ratio",
    "pp_schedule", "pp_virtual_stages", "pp_layout", "pp_delay_wgrad", "pp_memopt_stages",
    "backend", "device", "precision", "threads", "hostname", "cuda_graphs", "conv_algos",
    "pp_transfer_path", "tf32", "conv_fp32_precision", "matmul_fp32_precision",
    "compile",  # torch_bench.py only
    "conv_algo", "cpu_kernels_isa", "onednn_isa",  # spikemesh CPU records
    "cpu_capability",  # the peers' CPU kernel level
    "isa",  # added by report.py: the instruction set every system was held to
]
IGNORED_FOR_PAIRING = {"backend", "compile"}
# Part of a configuration (two runs that differ only here are two rows) but not of pairing: a
# TF32 peer sets both precisions, spikemesh's TF32 convolution runs may keep IEEE matrix
# products; "tf32" is the peers' older single switch, superseded by conv_fp32_precision.
NOT_PAIRED = {"matmul_fp32_precision", "tf32"}
FP32_PRECISIONS = ("conv_fp32_precision", "matmul_fp32_precision")
BACKENDS = ("spikemesh", "pytorch")


def read_records(paths):
    """All JSON-object lines of the logs, in file order; malformed lines are reported and skipped."""
    records = []
    for path in paths:
        try:
            f = open(path, encoding="utf-8", errors="replace")
        except OSError as e:
            print(f"compare.py: cannot read {path}: {e.strerror}", file=sys.stderr)
            continue
        with f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    rec = None
                if not isinstance(rec, dict):
                    print(f"compare.py: warning: {path}:{lineno}: not a JSON object record; skipped",
                          file=sys.stderr)
                    continue
                records.append(rec)
    return records


def fp32_precisions(rec):
    """{conv_fp32_precision, matmul_fp32_precision} of a CUDA fp32 record ("ieee" | "tf32"),
    {} otherwise (TF32 only concerns fp32 on a GPU). Records older than these fields: a peer's
    "tf32" switch set both; spikemesh's fp32 was strict IEEE."""
    if rec.get("device") != "cuda" or rec.get("precision") != "fp32":
        return {}
    legacy = "tf32" if rec.get("tf32") else "ieee"
    return {f: rec.get(f) or legacy for f in FP32_PRECISIONS}


def config_of(rec):
    """The configuration fields rec sets (None counts as unset), backend and compile excluded;
    on a GPU the host thread count is not part of the configuration (spikemesh records its
    OpenMP threads, the peers torch's: neither runs the step's arithmetic there); the fp32
    precisions as fp32_precisions() resolves them."""
    cfg = {f: rec[f] for f in CONFIG_FIELDS
           if f not in IGNORED_FOR_PAIRING and f not in FP32_PRECISIONS and rec.get(f) is not None
           and not (f == "threads" and rec.get("device") == "cuda")}
    cfg.update(fp32_precisions(rec))
    return cfg


def compatible(a, b):
    return all(a[f] == b[f] for f in (a.keys() & b.keys()) - NOT_PAIRED)


def numerics_label(rec):
    """The GPU numerics a record ran with: convolution policy (peers: cudnn.benchmark) and the
    fp32 precision of convolutions/matrix products, e.g. "fast-tuned conv tf32 mm ieee"."""
    if rec.get("device") != "cuda":
        return ""
    policy = rec.get("conv_algos") or ("exact" if rec.get("backend") == "spikemesh" else "cudnn.benchmark")
    p = fp32_precisions(rec)
    return policy + (f" conv {p['conv_fp32_precision']} mm {p['matmul_fp32_precision']}" if p else "")


def latest_by_config(records, backend):
    """{(config json, compile): latest record} for one backend, in order of first appearance."""
    out = {}
    for rec in records:
        if rec.get("backend") != backend:
            continue
        key = (json.dumps(config_of(rec), sort_keys=True), bool(rec.get("compile", False)))
        out.pop(key, None)  # re-insert: keeps the latest, ordered by its last appearance
        out[key] = rec
    return out


def memory_mb(rec):
    if rec.get("device") == "cuda" and rec.get("peak_allocated_mb") is not None:
        return rec["peak_allocated_mb"], "alloc"
    if rec.get("peak_rss_mb") is not None:
        return rec["peak_rss_mb"], "rss"
    if rec.get("peak_allocated_mb") is not None:
        return rec["peak_allocated_mb"], "alloc"
    return None, ""


def describe(cfg, torch_rec):
    """Short configuration label: model, T, batch, device, precision, threads, and the
    distribution settings that differ from a single plain rank."""
    batch = cfg.get("global_batch_size", cfg.get("batch_size", "?"))
    parts = [str(cfg.get("model", "?")), f"T{cfg.get('T', '?')}", f"b{batch}",
             str(cfg.get("device", "?")), str(cfg.get("precision", "?"))]
    if cfg.get("device") != "cuda" and "threads" in cfg:
        parts.append(f"{cfg['threads']}thr")
    if cfg.get("mode") not in (None, "none"):
        parts.append(str(cfg["mode"]))
    if cfg.get("world_size", 1) != 1:
        parts.append(f"W{cfg['world_size']}")
    if cfg.get("cuda_graphs") is False and cfg.get("device") == "cuda":
        parts.append("no-cuda-graphs")
    if cfg.get("conv_algos") not in (None, "exact"):
        parts.append(f"conv-{cfg['conv_algos']}")
    if cfg.get("conv_fp32_precision") == "tf32":
        parts.append("conv-tf32")
    if cfg.get("matmul_fp32_precision") == "tf32":
        parts.append("matmul-tf32")
    if cfg.get("memopt_level"):
        parts.append(f"memopt{cfg['memopt_level']}")
    if torch_rec is not None and torch_rec.get("compile"):
        parts.append("torch.compile")
    return " ".join(parts)


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def fmt_ratio(r):
    return "-" if r is None else f"{r:.2f}x"


def build_rows(records):
    sm = latest_by_config(records, "spikemesh")
    pt = latest_by_config(records, "pytorch")
    rows, paired_pt = [], set()
    for (sm_key, _), s in sm.items():
        s_cfg = json.loads(sm_key)
        matches = [(k, p) for k, p in pt.items() if compatible(s_cfg, json.loads(k[0]))]
        for k, p in matches or [(None, None)]:
            if k is not None:
                paired_pt.add(k)
            rows.append((s_cfg, s, p))
    for k, p in pt.items():
        if k not in paired_pt:
            rows.append((json.loads(k[0]), None, p))
    return rows


def print_table(rows, out=sys.stdout):
    head = (f"{'configuration':<44} {'samples/s':>27}   {'step latency ms':>29}   "
            f"{'peak memory MB':>30}")
    sub = (f"{'':<44} {'spikemesh':>9} {'pytorch':>9} {'ratio':>7}   {'spikemesh':>10} "
           f"{'pytorch':>10} {'ratio':>7}   {'spikemesh':>10} {'pytorch':>10} {'ratio':>7}")
    print(head, file=out)
    print(sub, file=out)
    print("-" * len(sub), file=out)
    for cfg, s, p in rows:
        label = describe(cfg, p)
        s_sps = s.get("global_throughput_sps") if s else None
        p_sps = p.get("global_throughput_sps") if p else None
        s_lat = s.get("step_latency_ms") if s else None
        p_lat = p.get("step_latency_ms") if p else None
        s_mem, s_kind = memory_mb(s) if s else (None, "")
        p_mem, p_kind = memory_mb(p) if p else (None, "")
        mem_ratio = ratio(s_mem, p_mem) if s_kind == p_kind else None
        print(f"{label:<44} {fmt(s_sps, '9.2f'):>9} {fmt(p_sps, '9.2f'):>9} {fmt_ratio(ratio(s_sps, p_sps)):>7}"
              f"   {fmt(s_lat, '10.2f'):>10} {fmt(p_lat, '10.2f'):>10} {fmt_ratio(ratio(s_lat, p_lat)):>7}"
              f"   {fmt(s_mem, '10.1f'):>10} {fmt(p_mem, '10.1f'):>10} {fmt_ratio(mem_ratio):>7}"
              f" {s_kind or p_kind}", file=out)
    print("ratio = spikemesh / pytorch: samples/s > 1, latency < 1 and memory < 1 favour spikemesh. "
          "memory: rss = peak resident set (CPU), alloc = peak allocated (CUDA).", file=out)


def system_label(rec):
    name = {"spikemesh": "spikemesh", "pytorch": "PyTorch twin", "spikingjelly": "SpikingJelly"}.get(
        rec.get("backend"), str(rec.get("backend")))
    if rec.get("backend") != "spikemesh":
        name += " + torch.compile" if rec.get("compile") else ", eager"
    return name


def print_all_systems(records, out=sys.stdout):
    """One block per spikemesh configuration (then peer-only configurations): every system's
    latest record, with spikemesh's throughput ratio and memory ratio against each peer."""
    sm = latest_by_config(records, "spikemesh")
    peers = {}
    for backend in sorted({r.get("backend") for r in records} - {"spikemesh", None}):
        peers.update({(backend,) + k: r for k, r in latest_by_config(records, backend).items()})
    blocks, used = [], set()
    for (key, _), s in sm.items():
        cfg = json.loads(key)
        mine = [(k, p) for k, p in peers.items() if compatible(cfg, json.loads(k[1]))]
        used.update(k for k, _ in mine)
        blocks.append((cfg, s, [p for _, p in mine]))
    for k, p in peers.items():
        if k not in used:
            blocks.append((json.loads(k[1]), None, [p]))
    print(f"{'system':<34} {'samples/s':>10} {'step ms':>9} {'peak MB':>9}   "
          f"{'spikemesh speed-up':>18} {'memory ratio':>12}   numerics (GPU)", file=out)
    for cfg, s, ps in blocks:
        print(f"-- {describe(cfg, None)}", file=out)
        s_sps = s.get("global_throughput_sps") if s else None
        s_mem, s_kind = memory_mb(s) if s else (None, "")
        for rec in ([s] if s else []) + ps:
            sps, lat = rec.get("global_throughput_sps"), rec.get("step_latency_ms")
            mem, kind = memory_mb(rec)
            speed = "" if rec is s else fmt_ratio(ratio(s_sps, sps))
            mem_r = "" if rec is s else fmt_ratio(ratio(s_mem, mem) if kind == s_kind else None)
            print(f"   {system_label(rec):<31} {fmt(sps, '10.2f'):>10} {fmt(lat, '9.2f'):>9} "
                  f"{fmt(mem, '9.1f'):>9}   {speed:>18} {mem_r:>12}   {numerics_label(rec)}".rstrip(), file=out)
    print("speed-up = spikemesh samples/s / the system's (> 1 favours spikemesh); memory ratio = "
          "spikemesh peak / the system's (< 1 favours spikemesh); peak = allocated (CUDA) or RSS (CPU). "
          "numerics: convolution policy, fp32 precision of convolutions (conv) and matrix products (mm); "
          "a peer pairs by its convolution precision.", file=out)
    return len(blocks)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("logs", nargs="+", help="JSONL result log(s)")
    ap.add_argument("--json", action="store_true",
                    help="print the pairs as JSON lines {configuration, spikemesh, pytorch}")
    ap.add_argument("--all", action="store_true",
                    help="every system per configuration (SpikingJelly too), with spikemesh's ratios")
    args = ap.parse_args(argv)
    records = read_records(args.logs)
    if args.all:
        if print_all_systems(records) == 0:
            print(f"compare.py: no benchmark records in {', '.join(args.logs)}")
            return 1
        return 0
    rows = build_rows(records)
    if not rows:
        print(f"compare.py: no spikemesh or pytorch records in {', '.join(args.logs)}")
        return 1
    if args.json:
        for cfg, s, p in rows:
            print(json.dumps({"configuration": cfg, "spikemesh": s, "pytorch": p}))
    else:
        print_table(rows)
    return 0 if any(s is not None and p is not None for _, s, p in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
