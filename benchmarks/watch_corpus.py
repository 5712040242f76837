"""tl.watch()'s invariants over corpora of real code nobody here wrote (see corpora.py here and
tpu_lab.testing.watch_invariants): per corpus, the cases run and each invariant's violations, listed.

    python benchmarks/watch_corpus.py [--corpus module_db optim_db op_db transformers masked_lm] [--limit N] [--show 5]

Needs the ``expecttest`` package for torch's databases (``pip install expecttest``). The whole of each
corpus by default; tests/test_watch_corpus.py runs a sample of each in CI.
"""

import argparse
import collections
import logging
import resource
import sys
import time

import torch
from corpora import CORPORA

import tpu_lab as tl
from tpu_lab.testing.dynamo_account import DynamoAccount
from tpu_lab.testing.watch_invariants import INVARIANTS, not_translated, violations


def run_case(case):
    """One case inside a watch and Dynamo's own account of it: (violations, guards not translated)."""
    torch._dynamo.reset()
    with DynamoAccount() as account, tl.watch() as w:
        case.run()
    seen = (
        len(account.compiled()),
        len(account.failed()),
        len(account.refused()),
        len(account.graph_breaks()),
        account.graphs["backward"],
    )
    return violations(w.table, account), not_translated(w.table), seen


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", nargs="+", default=list(CORPORA), choices=list(CORPORA))
    parser.add_argument("--limit", type=int, default=None, help="cases per corpus (default: all)")
    parser.add_argument("--show", type=int, default=5, help="violations listed per invariant")
    parser.add_argument("--memory-gb", type=float, default=12, help="address-space cap: a case that needs more fails")
    args = parser.parse_args()
    cap = int(args.memory_gb * 2**30)  # a MemoryError inside one case, not the OOM killer ending the whole run
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    logging.getLogger("torch").setLevel(logging.ERROR)  # Dynamo's own warnings are the watch's rows here
    worst = 0
    for corpus in args.corpus:
        start, cases = time.perf_counter(), 0
        found: dict[str, list[str]] = collections.defaultdict(list)
        untranslated: collections.Counter[str] = collections.Counter()
        seen = [0, 0, 0, 0, 0]
        for case in CORPORA[corpus](args.limit):
            cases += 1
            bad, raw, counts = run_case(case)
            seen = [a + b for a, b in zip(seen, counts, strict=True)]
            for key, items in bad.items():
                found[key] += [f"{case.name}: {v}" for v in items]
            untranslated.update(raw)
        print(f"{corpus}: {cases} cases in {time.perf_counter() - start:.0f} s")
        print(
            f"  Dynamo recorded {seen[0]} graphs, {seen[1]} failed compiles, {seen[2]} limit refusals; "
            f"TORCH_LOGS logged {seen[3]} graph breaks; AOTAutograd compiled {seen[4]} backward graphs "
            "(counted where the corpus trains)"
        )
        for key in INVARIANTS:
            print(f"  {key}: {len(found[key])} violations")
            for line in found[key][: args.show]:
                print(f"    {line[:300]}")
            worst = max(worst, len(found[key]))
        print(f"  guards shown as Dynamo's text, marked not translated: {sum(untranslated.values())}")
        for guard, n in untranslated.most_common(args.show):
            print(f"    {n} x {guard[:200]}")
    sys.exit(1 if worst else 0)


if __name__ == "__main__":
    main()
