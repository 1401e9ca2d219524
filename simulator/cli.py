"""The ``specproof`` command line: ``list``, ``law``, ``certify``, ``mc``, ``generate``, ``dynamic``, ``real``,
``theorems`` and ``report``.

Exit status: 0 on success (``certify``: lossless), 1 when ``certify`` finds the verifier lossy or
``report``, ``theorems`` or ``dynamic`` finds a verdict that contradicts its expectation (``generate --exact``: lossy),
2 on bad input (a typed error naming the field).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from tqdm import tqdm

from exact import certify as certify_exact
from exact import fixed_tree_law
from exact.table import certification_table, table_markdown
from exact.generation import generation_law
from exact.theorems import CHECKS, run_checks, theorems_markdown

from .case import load_case
from .aded import AdedConfig
from .drafters import DRAFTERS, DrafterOptions, make_drafter
from .drafting import DRAFTING, FixedShape
from .montecarlo import monte_carlo
from .study import PAPER_SEEDS, PAPER_TRIALS, Store, paper_cells, run_cells
from .study_report import write_study_report
from .dynamic_report import write_dynamic_report
from .generation import run_generations
from .errors import SpecproofError
from .models import RandomRationalModel, SyntheticModel, TableModel
from .numeric import ARITHMETICS, to_json_number
from .trees import TOPOLOGIES, make_topology
from .verifiers import VERIFIERS
from .verifiers import load_verifier
from .verifiers.registry import check_pairing
from .jsonfile import read_json

MODELS = {
    "synthetic": "correlated Gaussian logits (SPEC §2): --vocab --rho --tau-p --tau-q --seed",
    "table": "explicit rows per context from --table FILE (floats or 'num/den' strings)",
    "random-rational": "small-integer weights per context, exact rationals with zeros: --vocab --seed",
}


class SpecproofGroup(click.Group):
    """Turns every typed input error into exit status 2 with the offending field named."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except SpecproofError as err:
            click.echo(f"error: {err.field}: {err.message}", err=True)
            sys.exit(2)


@click.group(cls=SpecproofGroup)
@click.version_option(package_name="specproof")
def main() -> None:
    """specproof: exact certificates and measurements for speculative-decoding verifiers."""


@main.command("list")
def list_cmd() -> None:
    """Every built-in model kind, topology, drafting scheme and verifier, one line each."""
    for name, text in MODELS.items():
        click.echo(f"model      {name:22s} {text}")
    for name, text in TOPOLOGIES.items():
        click.echo(f"topology   {name:22s} {text}")
    for name, text in DRAFTERS.items():
        click.echo(f"drafting   {name:22s} {text}")
    for spec in VERIFIERS.values():
        where = ", ".join(spec.lossless_under) if spec.lossless_under else "lossy by design"
        click.echo(f"verifier   {spec.name:22s} {spec.description} [lossless under: {where}]")


@main.command()
@click.option("--case", "case_path", required=True, type=click.Path(dir_okay=False), help="CASE.json")
@click.option("--arithmetic", type=click.Choice(ARITHMETICS), default="fraction", show_default=True)
def law(case_path: str, arithmetic: str) -> None:
    """The exact output law of a verifier on one fixed tree (CASE.json), as JSON."""
    case = load_case(case_path, arithmetic)
    result = fixed_tree_law(case.tree, case.p, case.q, case.verifier, case.vocab, arithmetic)
    out = {"law": [{"path": list(path), "y": y, "prob": to_json_number(prob, arithmetic)}
                   for (path, y), prob in result.law().items()],
           "expected_accepted": to_json_number(result.expected_accepted(), arithmetic)}
    click.echo(json.dumps(out, indent=1))


def _model_options(fn):
    options = [
        click.option("--model", "model_kind", type=click.Choice(list(MODELS)), default="synthetic",
                     show_default=True),
        click.option("--table", "table_path", type=click.Path(dir_okay=False), help="table JSON (--model table)"),
        click.option("--vocab", type=int, default=3, show_default=True),
        click.option("--seed", type=int, default=0, show_default=True),
        click.option("--rho", type=float, default=0.5, show_default=True),
        click.option("--tau-p", type=float, default=1.0, show_default=True),
        click.option("--tau-q", type=float, default=1.0, show_default=True),
        click.option("--zero-prob", type=float, default=0.25, show_default=True,
                     help="random-rational: chance that a weight is zeroed"),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def build_model(model_kind: str, table_path: str | None, vocab: int, seed: int, rho: float, tau_p: float,
                tau_q: float, zero_prob: float = 0.25):
    if model_kind == "synthetic":
        return SyntheticModel(vocab, rho, tau_p, tau_q, seed)
    if model_kind == "random-rational":
        return RandomRationalModel(vocab, seed, zero_prob=zero_prob)
    if table_path is None:
        raise SpecproofError("table", "--model table needs --table FILE")
    return TableModel.from_file(table_path)


def _parse_parents(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(t) for t in text.replace(" ", "").split(",") if t != ""]
    except ValueError:
        raise SpecproofError("parents", f"expected comma-separated integers, got {text!r}") from None


def _tree_options(fn):
    options = [
        click.option("--topology", type=click.Choice(list(TOPOLOGIES)), default="complete", show_default=True),
        click.option("--depth", type=int, default=2, show_default=True, help="draft depth H"),
        click.option("--branching", type=int, default=2, show_default=True, help="branching b"),
        click.option("--parents", help="explicit parent list, e.g. '-1,0,0,1' (implies --topology explicit)"),
        click.option("--drafting", type=click.Choice(list(DRAFTERS)), default="iid", show_default=True),
        click.option("--budget", type=int, default=6, show_default=True, help="dyspec: draft tokens per tree"),
        click.option("--threshold", type=float, default=0.1, show_default=True,
                     help="dyspec-threshold: least estimated value to sample at"),
        click.option("--max-depth", type=int, default=4, show_default=True, help="dyspec-threshold: depth cap"),
        click.option("--corpus", "corpus_path", type=click.Path(dir_okay=False),
                     help="aded: JSON list of token sequences (default: 32 sampled from the draft model)"),
        click.option("--mcts-iterations", type=int, default=150, show_default=True, help="aded: MCTS iterations"),
        click.option("--candidates", type=int, default=24, show_default=True, help="aded: candidate sequences"),
        click.option("--candidate-length", type=int, default=4, show_default=True, help="aded: tokens per candidate"),
        click.option("--verifier", required=True, help="built-in name (specproof list) or module:function"),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _build_shape(topology: str, depth: int, branching: int, parents: str | None):
    parent_list = _parse_parents(parents)
    if parent_list is not None:
        topology = "explicit"
    return topology, make_topology(topology, depth, branching, parent_list)


def _build_drafter(model, tree: dict):
    """The drafter of the tree options, with the configuration to print and store."""
    scheme = tree["drafting"]
    topology, shape = _build_shape(tree["topology"], tree["depth"], tree["branching"], tree["parents"])
    corpus = read_json(tree["corpus_path"], "corpus") if tree["corpus_path"] else None
    if corpus is not None and not (isinstance(corpus, list) and all(isinstance(c, list) for c in corpus)):
        raise SpecproofError("corpus", "must be a JSON list of token-id lists")
    options = DrafterOptions(tree["budget"], tree["threshold"], tree["max_depth"],
                             AdedConfig(tree["mcts_iterations"], tree["candidate_length"], tree["candidates"]),
                             corpus)
    drafter = make_drafter(scheme, shape, model, options)
    check_pairing(tree["verifier"], scheme)
    config = drafter.describe()
    if scheme in DRAFTING and topology != "explicit":
        config["branching"] = tree["branching"]
    return drafter, config


@main.command()
@_model_options
@_tree_options
@click.option("--arithmetic", type=click.Choice(ARITHMETICS), default="fraction", show_default=True)
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="write the certificate here")
def certify(model_kind, table_path, vocab, seed, rho, tau_p, tau_q, zero_prob, arithmetic, json_out, **tree) -> None:
    """Certify a verifier exactly: TVD of its completed output law to q^(H+1). Exit 0 lossless, 1 lossy."""
    model = build_model(model_kind, table_path, vocab, seed, rho, tau_p, tau_q, zero_prob)
    drafter, drafting = _build_drafter(model, tree)
    config = {**model.describe(), **drafting}
    cert = certify_exact(model, drafter, tree["verifier"], arithmetic, config=config)
    verdict = "LOSSLESS" if cert.lossless else "LOSSY"
    exactness = "exactly, rationals" if arithmetic == "fraction" else f"float64, tolerance {cert.tolerance:g}"
    click.echo(f"{cert.verifier}: {verdict} ({exactness})")
    click.echo(f"  model {config['model']}, " + ", ".join(f"{k} {v}" for k, v in drafting.items()))
    click.echo(f"  TVD to q^(H+1) = {cert.tvd} ({float(cert.tvd):.6g})")
    click.echo(f"  E[accepted] = {cert.expected_accepted} ({float(cert.expected_accepted):.6g}); "
               f"block efficiency {float(cert.expected_accepted) + 1:.6g}")
    if cert.counterexample is not None:
        ce = cert.counterexample
        click.echo(f"  counterexample: sequence {list(ce.sequence)} has probability {ce.verifier_prob} "
                   f"({float(ce.verifier_prob):.6g}) under the verifier, {ce.target_prob} "
                   f"({float(ce.target_prob):.6g}) under the target")
    click.echo(f"  {cert.executions} executions enumerated")
    if json_out:
        Path(json_out).write_text(json.dumps(cert.to_json(), indent=1) + "\n")
    sys.exit(0 if cert.lossless else 1)


QUICK_TABLES = (1,)
QUICK_SEEDS, QUICK_TRIALS = 3, 1000


@main.command()
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="specproof-report", show_default=True,
              help="folder for the reports (the committed ones are made with --full --out reports)")
@click.option("--full", is_flag=True, help="the paper's scale: 20 seeds, Table 1 at 1e6 and ablations at 1e5 trials")
@click.option("--tables", default=None, help="comma-separated paper tables (1,4-15); quick default: 1; --full: all")
@click.option("--seeds", "study_seeds", type=int, default=None, help="override the model seeds per cell")
@click.option("--trials", "study_trials", type=int, default=None, help="override the trials per seed")
@click.option("--verifiers", default=None, help="comma-separated: run only these methods' cells (others: not run)")
@click.option("--jobs", type=int, default=2, show_default=True, help="worker processes for the study")
@click.option("--no-run", is_flag=True, help="write the reports from what the store holds, computing nothing")
@click.option("--store", "store_dir", type=click.Path(file_okay=False), default=None,
              help="resumable cell store (default OUT/store)")
@click.option("--vocab", type=int, default=3, show_default=True, help="certification table: vocabulary")
@click.option("--depth", type=int, default=2, show_default=True, help="certification table: depth")
@click.option("--branching", type=int, default=2, show_default=True, help="certification table: branching")
@click.option("--seed", type=int, default=0, show_default=True, help="certification table: model seed")
@click.option("--arithmetic", type=click.Choice(ARITHMETICS), default="fraction", show_default=True)
def report(out_dir, full, tables, study_seeds, study_trials, verifiers, jobs, no_run, store_dir, vocab, depth, branching,
           seed,
           arithmetic) -> None:
    """The main job: the certification table and the layer_verification.txt toy study, written to OUT."""
    chosen = _parse_tables(tables) if tables else (tuple(PAPER_TRIALS) if full else QUICK_TABLES)
    for field, value, minimum in (("seeds", study_seeds, 1), ("trials", study_trials, 2), ("jobs", jobs, 1)):
        if value is not None and value < minimum:
            raise SpecproofError(field, f"must be at least {minimum}, got {value}")
    seeds = study_seeds if study_seeds is not None else (PAPER_SEEDS if full else QUICK_SEEDS)
    trials = {t: study_trials if study_trials is not None else (PAPER_TRIALS[t] if full else QUICK_TRIALS)
              for t in chosen}
    cells = [cell for t in chosen for _, _, cell in paper_cells(t, seeds, trials[t])]
    if verifiers:
        wanted = {v.strip() for v in verifiers.split(",")}
        unknown = wanted - {c.verifier for c in cells}
        if unknown:
            raise SpecproofError("verifiers", f"no cells for {sorted(unknown)} in tables {list(chosen)}")
        cells = [c for c in cells if c.verifier in wanted]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ok = _certification_report(out, vocab, depth, branching, seed, arithmetic)
    store = Store(store_dir or out / "store")
    unique = list(dict.fromkeys(cells))
    total = sum(c.seeds * c.trials for c in unique)
    with tqdm(total=len(unique) * seeds, unit="seed", desc="cells x seeds", disable=None, file=sys.stderr) as bar, \
            tqdm(total=total, unit="trial", desc="trials", disable=None, file=sys.stderr) as trial_bar:
        done = sum(1 for c in unique for s in range(c.seeds) if store.load(c, s) is not None)
        bar.update(done)
        if not no_run:
            run_cells(unique, store, jobs, lambda cell, s, n: (bar.update(1), trial_bar.update(n)))
    command = "specproof report " + ("--full " if full else "") + f"--out {out_dir}"
    write_study_report(out, chosen, store, seeds, trials, command)
    click.echo(f"written to {out}/")
    sys.exit(0 if ok else 1)


def _parse_tables(text: str) -> tuple[int, ...]:
    out = []
    for part in text.split(","):
        a, _, b = part.strip().partition("-")
        try:
            out.extend(range(int(a), int(b or a) + 1))
        except ValueError:
            raise SpecproofError("tables", f"expected numbers like 1,4-6, got {text!r}") from None
    bad = [t for t in out if t not in PAPER_TRIALS]
    if bad:
        raise SpecproofError("tables", f"no toy table {bad[0]}; choose from {sorted(PAPER_TRIALS)}")
    return tuple(dict.fromkeys(out))


def _certification_report(out: Path, vocab: int, depth: int, branching: int, seed: int, arithmetic: str) -> bool:
    model = SyntheticModel(vocab=vocab, seed=seed)
    title = (f"Certification table: synthetic model (V={vocab}, rho=0.5, tau_p=tau_q=1, seed={seed}), "
             f"depth {depth}, branching {branching}, {arithmetic} arithmetic")
    rows = certification_table(model, depth, branching, arithmetic)
    text = table_markdown(rows, title)
    (out / "certification.md").write_text(text)
    (out / "certification.json").write_text(json.dumps(
        [{"verifier": r.verifier, "topology": r.topology, "drafting": r.drafting,
          "expected_lossless": r.expected_lossless, **r.certificate.to_json()} for r in rows], indent=1) + "\n")
    click.echo(text)
    return all(r.as_expected for r in rows)


@main.command()
@_model_options
@_tree_options
@click.option("--seeds", type=int, default=5, show_default=True, help="model seeds 0..K-1 (--seed is ignored)")
@click.option("--trials", type=int, default=10_000, show_default=True, help="rounds per model seed")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="write the summary here")
def mc(model_kind, table_path, vocab, seed, rho, tau_p, tau_q, zero_prob, seeds, trials, json_out, **tree) -> None:
    """Monte Carlo: mean accepted length (SE across model seeds), TVD vs the paper's baseline, a powered test."""
    name, fn = load_verifier(tree["verifier"])
    model = build_model(model_kind, table_path, vocab, 0, rho, tau_p, tau_q, zero_prob)  # validate once, up front
    drafter, drafting = _build_drafter(model, tree)
    with tqdm(total=seeds * trials, unit="trial", disable=None, file=sys.stderr) as bar:
        summary = monte_carlo(lambda s: build_model(model_kind, table_path, vocab, s, rho, tau_p, tau_q, zero_prob),
                              drafter, name, fn, seeds, trials, bar.update)
    click.echo(f"{name}, " + ", ".join(f"{k} {v}" for k, v in drafting.items()) + f": {seeds} seeds x {trials} trials")
    click.echo(f"  accepted length {summary.accept_len_mean:.4f} (SE {summary.accept_len_se:.4f})")
    click.echo(f"  TVD of completed samples to q^(H+1) {summary.tvd:.4f}; direct target samples "
               f"{summary.baseline_tvd:.4f}")
    verdict = "REJECTS" if summary.test_rejects else "does not reject"
    click.echo(f"  chi-square on the first {summary.test_prefix} token(s) ({summary.test_cells} cells), "
               f"alpha {summary.test_alpha:g} over all seeds: {verdict} the target "
               f"(min p {summary.test_min_p_value:.3g}); "
               f"detects any TVD >= {summary.detectable_tvd:.4f} on that law with power 0.9")
    if json_out:
        Path(json_out).write_text(json.dumps(summary.to_json(), indent=1) + "\n")


@main.command()
@_model_options
@_tree_options
@click.option("--tokens", type=int, default=8, show_default=True, help="tokens to generate (N)")
@click.option("--exact", "exact_law", is_flag=True, help="the exact law of the first N tokens (small models only)")
@click.option("--arithmetic", type=click.Choice(ARITHMETICS), default="fraction", show_default=True,
              help="--exact: arithmetic")
@click.option("--seeds", type=int, default=5, show_default=True, help="Monte Carlo: model seeds 0..K-1")
@click.option("--trials", type=int, default=1000, show_default=True, help="Monte Carlo: generations per seed")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="write the result here")
def generate(model_kind, table_path, vocab, seed, rho, tau_p, tau_q, zero_prob, tokens, exact_law, arithmetic, seeds,
             trials, json_out, **tree) -> None:
    """Several draft-verify rounds until N tokens exist, drafter state carried across rounds: the exact law of
    the first N tokens against the target's (--exact; exit 1 when lossy), or Monte Carlo accepted per round."""
    name, fn = load_verifier(tree["verifier"])
    model = build_model(model_kind, table_path, vocab, seed, rho, tau_p, tau_q, zero_prob)
    drafter, drafting = _build_drafter(model, tree)
    label = ", ".join(f"{k} {v}" for k, v in drafting.items())
    if exact_law:
        result = generation_law(model, drafter, fn, tokens, arithmetic)
        verdict = "LOSSLESS" if result.lossless else "LOSSY"
        click.echo(f"{name}: {verdict} over the first {tokens} tokens ({label}; model {model.describe()['model']})")
        click.echo(f"  TVD to q^{tokens} = {result.tvd} ({float(result.tvd):.6g}); E[rounds] = "
                   f"{float(result.expected_rounds):.6g}; "
                   f"E[accepted draft tokens] = {float(result.expected_accepted):.6g}")
        if result.counterexample is not None:
            ce = result.counterexample
            click.echo(f"  counterexample: {list(ce.sequence)} has {float(ce.verifier_prob):.6g} vs target "
                       f"{float(ce.target_prob):.6g}")
        out = {"verifier": name, "tokens": tokens, "lossless": result.lossless,
               "tvd": to_json_number(result.tvd, arithmetic),
               "expected_rounds": to_json_number(result.expected_rounds, arithmetic),
               "expected_accepted": to_json_number(result.expected_accepted, arithmetic), **drafting}
    else:
        with tqdm(total=seeds * trials, unit="generation", disable=None, file=sys.stderr) as bar:
            summary = run_generations(lambda s: build_model(model_kind, table_path, vocab, s, rho, tau_p, tau_q,
                                                            zero_prob), drafter, name, fn, seeds, trials, tokens,
                                      bar.update)
        click.echo(f"{name}, {label}: {seeds} seeds x {trials} generations of {tokens} tokens")
        click.echo(f"  accepted per round {summary.accepted_per_round:.4f} (SE {summary.accepted_per_round_se:.4f}); "
                   f"rounds {summary.rounds_mean:.3f}")
        out = {**summary.to_json(), **drafting}
    if json_out:
        Path(json_out).write_text(json.dumps(out, indent=1) + "\n")
    sys.exit(0 if not exact_law or result.lossless else 1)


@main.command()
@click.option("--draft", "draft_dir", required=True, type=click.Path(file_okay=False), help="draft model directory")
@click.option("--target", "target_dir", required=True, type=click.Path(file_okay=False),
              help="target model directory (its tokenizer is used)")
@click.option("--questions", required=True, type=click.Path(dir_okay=False), help="Spec-Bench question.jsonl")
@click.option("--answers", required=True, type=click.Path(dir_okay=False), help="answers .jsonl to write")
@click.option("--verifier", required=True, help="a verifier with a torch path (simulator.torch_verify)")
@click.option("--topology", type=click.Choice(list(TOPOLOGIES)), default="complete", show_default=True)
@click.option("--depth", type=int, default=3, show_default=True)
@click.option("--branching", type=int, default=2, show_default=True)
@click.option("--parents", help="explicit parent list (implies --topology explicit)")
@click.option("--drafting", type=click.Choice(list(DRAFTING)), default="iid", show_default=True)
@click.option("--max-new-tokens", type=int, default=64, show_default=True)
@click.option("--temperature", type=float, default=1.0, show_default=True)
@click.option("--top-k", type=int, default=0, show_default=True)
@click.option("--top-p", type=float, default=1.0, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
def real(draft_dir, target_dir, questions, answers, verifier, topology, depth, branching, parents, drafting,
         max_new_tokens, temperature, top_k, top_p, seed) -> None:
    """Spec-Bench-compatible run on a local draft/target pair: answers in Spec-Bench's format, block efficiency
    and tokens/s against target-only decoding."""
    from transformers import AutoTokenizer

    from .real import Processing, load_causal_lm
    from .spec_bench import read_questions, run_spec_bench

    if max_new_tokens < 1:
        raise SpecproofError("max_new_tokens", f"must be at least 1, got {max_new_tokens}")
    _, shape = _build_shape(topology, depth, branching, parents)
    processing = Processing(temperature, top_k, top_p)
    draft, target = load_causal_lm(draft_dir), load_causal_lm(target_dir)
    try:
        tokenizer = AutoTokenizer.from_pretrained(target_dir, local_files_only=True)
    except (OSError, ValueError) as err:
        raise SpecproofError("target", f"no tokenizer in {target_dir}: {err}") from None
    summary = run_spec_bench(draft, target, tokenizer, read_questions(questions), verifier,
                             FixedShape(shape, drafting), answers, max_new_tokens, processing, processing, seed,
                             f"specproof-{verifier}")
    click.echo(f"{verifier} on {topology} {list(shape.parents)}, drafting {drafting}: {summary.questions} questions, "
               f"{summary.tokens} tokens")
    click.echo(f"  block efficiency {summary.block_efficiency:.3f} tokens per target pass; "
               f"{summary.tokens_per_s:.1f} tokens/s vs target-only {summary.baseline_tokens_per_s:.1f} "
               f"(x{summary.speedup:.2f})")
    click.echo(f"  answers written to {answers}")


@main.command()
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="specproof-report", show_default=True)
@click.option("--instances", type=int, default=40, show_default=True, help="random models per DySpec drafter")
@click.option("--seeds", type=int, default=10, show_default=True, help="model seeds of the Monte Carlo comparison")
@click.option("--trials", type=int, default=200, show_default=True, help="generations per model seed")
@click.option("--tokens", type=int, default=10, show_default=True, help="tokens per generation")
@click.option("--seed", type=int, default=0, show_default=True, help="seed of the random instances")
def dynamic(out_dir: str, instances: int, seeds: int, trials: int, tokens: int, seed: int) -> None:
    """DySpec's and ADED's drafters: exact certificates, D.1 greedy check, accepted tokens per round vs fixed trees."""
    for field, value, minimum in (("instances", instances, 1), ("seeds", seeds, 2), ("trials", trials, 1),
                                  ("tokens", tokens, 1)):
        if value < minimum:
            raise SpecproofError(field, f"must be at least {minimum}, got {value}")
    command = (f"specproof dynamic --out {out_dir} --instances {instances} --seeds {seeds} --trials {trials} "
               f"--tokens {tokens} --seed {seed}")
    ok = write_dynamic_report(Path(out_dir), instances, seeds, trials, tokens, seed, command,
                              lambda text: click.echo(f"{text} ...", err=True))
    click.echo(f"written to {out_dir}/dynamic.md")
    sys.exit(0 if ok else 1)


@main.command()
@click.option("--scale", type=float, default=1.0, show_default=True,
              help="multiplies every check's default instance count")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--check", "only", multiple=True, type=click.Choice(list(CHECKS)), help="run only these (repeatable)")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), help="write the Markdown report here")
def theorems(scale: float, seed: int, only: tuple[str, ...], out_path: str | None) -> None:
    """Check the papers' claims on random exact instances: claim, instances, worst margin, verdict."""
    if not scale > 0:
        raise SpecproofError("scale", f"must be positive, got {scale}")
    checks = run_checks(scale, seed, only or None, progress=lambda name: click.echo(f"checking {name} ...", err=True))
    argv = ["specproof theorems", f"--scale {scale:g}", f"--seed {seed}", *(f"--check {o}" for o in only)]
    text = theorems_markdown(checks, " ".join(argv) + (f" --out {out_path}" if out_path else ""))
    click.echo(text)
    if out_path:
        Path(out_path).parent.mkdir(parents=True, exist_ok=True)
        Path(out_path).write_text(text)
    sys.exit(0 if all(c.as_expected for c in checks) else 1)


if __name__ == "__main__":  # pragma: no cover
    main()
