"""``ooc-svm train``: fit an SVM on a store with one of the four solvers."""

from __future__ import annotations

import argparse
import json
import sys
import time

from ..solvers import SOLVER_MODULES


def add_parser(sub) -> None:
    from ..solvers import available_solvers, get_solver

    lines = []
    solvers = available_solvers()
    for name in solvers:
        mod = get_solver(name)
        defaults = ", ".join(f"{k}={v}" for k, v in mod.DEFAULTS.items())
        lines.append(f"  {name}: {mod.STOPPING_RULE}\n    defaults: {defaults}")
    p = sub.add_parser(
        "train",
        help="train an SVM on a store",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Train a linear or kernel SVM on a store with one of the solvers.\n"
            "C follows LIBLINEAR/LIBSVM: minimise 1/2 |w|^2 + C * sum_i xi_i.\n\n"
            "Solvers (stopping rule and defaults):\n" + "\n".join(lines)
        ),
    )
    p.add_argument("store", help="store made by `ooc-svm ingest` or `ooc-svm synth`")
    p.add_argument("-o", "--output", required=True, help="model directory to write")
    p.add_argument("--solver", choices=list(SOLVER_MODULES), default="perf")
    p.add_argument("--C", type=float, default=None, help="regularisation (LIBLINEAR units)")
    p.add_argument(
        "--kernel",
        choices=["linear", "rbf", "poly", "sigmoid"],
        default=None,
        help="kernel (dual solvers; perf is linear only)",
    )
    p.add_argument("--gamma", type=float, default=None, help="kernel gamma (default 1/n_features)")
    p.add_argument("--degree", type=int, default=None, help="poly kernel degree")
    p.add_argument("--coef0", type=float, default=None, help="poly / sigmoid kernel coef0")
    p.add_argument("--eps", type=float, default=None, help="perf: stopping tolerance epsilon")
    p.add_argument("--tol", type=float, default=None, help="dual solvers: KKT tolerance")
    p.add_argument("--bias", type=float, default=None, help="value of the constant bias feature")
    p.add_argument("--seed", type=int, default=None, help="seed of every randomised step")
    p.add_argument("--cache-mb", type=float, default=None, help="kernel cache budget in MB")
    p.add_argument("--max-iter", type=int, default=None, help="iteration limit")
    p.add_argument(
        "--scheduler",
        default=None,
        help="local (default, also $OOC_SVM_SCHEDULER), threads, processes, or a Dask "
        "scheduler address tcp://HOST:PORT / scheduler-file.json",
    )
    p.add_argument(
        "--shard-cache-mb",
        type=float,
        default=None,
        dest="shard_cache_mb",
        help="keep up to this many MiB of decoded shards in memory between passes (per "
        "process; default $OOC_SVM_SHARD_CACHE_MB or 0). Set it near the store's decoded "
        "size when that fits: later passes skip reading and decoding",
    )
    p.add_argument("--json", action="store_true", help="print a one-line JSON summary")
    p.add_argument(
        "--config",
        default=None,
        help="TOML file of solver parameters (e.g. conf/perf.toml); flags given on the command "
        "line override its values. Keys are parameter names (C, eps, tol, ...), at top level "
        "or in a [SOLVER] table.",
    )
    p.add_argument(
        "--multiclass",
        choices=["ovr"],
        default=None,
        help="one-vs-rest for more than two classes (default for multiclass stores)",
    )
    p.add_argument(
        "--checkpoint",
        default=None,
        metavar="DIR",
        help="write the solver state to DIR after every iteration (atomically)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from the latest checkpoint in --checkpoint DIR (same parameters)",
    )
    p.add_argument(
        "--history",
        default=None,
        metavar="FILE.jsonl",
        help="record every iteration (objective, violation, passes, seconds, working set) "
        "as JSON lines; plot with `ooc-svm plot`",
    )
    for name in solvers:
        mod = get_solver(name)
        if hasattr(mod, "add_arguments"):
            mod.add_arguments(p.add_argument_group(f"{name} options"))
    p.set_defaults(func=run, _defaults={a.dest: a.default for a in p._actions})


#: CLI option names that are not solver parameters
_NOT_PARAMS = {
    "store",
    "output",
    "solver",
    "scheduler",
    "json",
    "func",
    "command",
    "verbose",
    "quiet",
    "config",
    "history",
    "_defaults",
    "multiclass",
    "checkpoint",
    "resume",
    "shard_cache_mb",
}


def load_config(path: str, solver: str) -> dict:
    """Parameters from a TOML file: top-level keys, overridden by a ``[solver]`` table."""
    import tomllib

    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise OSError(f"{path}: config file not found") from None
    except tomllib.TOMLDecodeError as e:
        raise OSError(f"{path}: invalid TOML ({e})") from None
    out = {k.replace("-", "_"): v for k, v in doc.items() if not isinstance(v, dict)}
    table = doc.get(solver) or doc.get(solver.replace("-", "_")) or {}
    out.update({k.replace("-", "_"): v for k, v in table.items()})
    return out


def run(args) -> int:
    from tqdm import tqdm

    from ..api import train
    from ..solvers import get_solver

    mod = get_solver(args.solver)
    defaults = args._defaults
    given = {
        k: v
        for k, v in vars(args).items()
        if k not in _NOT_PARAMS and v is not None and v != defaults.get(k)
    }
    params = load_config(args.config, args.solver) if args.config else {}
    unknown = sorted(set(params) - set(mod.DEFAULTS))
    if unknown:
        print(
            f"ooc-svm: error: {args.config}: --solver {args.solver} has no parameter "
            + ", ".join(unknown),
            file=sys.stderr,
        )
        return 2
    params.update({k: v for k, v in given.items() if k in mod.DEFAULTS})
    foreign = [k for k in given if k not in mod.DEFAULTS]
    if foreign:
        print(
            f"ooc-svm: error: --solver {args.solver} does not take "
            + ", ".join("--" + k.replace("_", "-") for k in foreign),
            file=sys.stderr,
        )
        return 2
    tty = sys.stderr.isatty()
    bar = tqdm(unit="it", disable=not tty, dynamic_ncols=True)

    def progress(rec: dict) -> None:
        bar.update(1)
        shown = {
            k: rec[k]
            for k in ("objective", "xi", "violation", "gap", "working_set", "pass_seconds")
            if k in rec and rec[k] is not None
        }
        bar.set_postfix({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in shown.items()})

    history = None
    if args.history:
        from ..reports import HistoryWriter

        history = HistoryWriter(
            args.history, header={"solver": args.solver, "store": args.store, "params": params}
        )

    def callback(rec: dict) -> None:
        progress(rec)
        if history is not None:
            history(rec)

    t0 = time.perf_counter()
    try:
        result = train(
            args.store,
            args.solver,
            scheduler=args.scheduler,
            callback=callback,
            multiclass=args.multiclass,
            checkpoint=args.checkpoint,
            resume=args.resume,
            shard_cache_mb=args.shard_cache_mb,
            **params,
        )
    finally:
        bar.close()
        if history is not None:
            history.close()
    result.seconds = result.seconds or (time.perf_counter() - t0)
    result.model.save(args.output)
    summary = result.to_json_dict(args.solver)
    if args.json:
        print(json.dumps(summary))
    else:
        obj = summary.get("objective")
        print(
            f"{args.solver}: objective {obj if obj is None else f'{obj:.8g}'}, "
            f"{summary['iterations']} iterations, {summary['passes']} passes, "
            f"{summary['seconds']:.2f}s -> {args.output}"
        )
    return 0
