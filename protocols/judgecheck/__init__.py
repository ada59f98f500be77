"""Judge check: how well a protocol's judging step agrees with human labels, before a run trusts it.

``dyneval --protocol judgecheck --judge NAME --labels FILE [--jury MODEL ...] [--repeats K] [--label-map
VALUE=LABEL,...] [--label-vote COL1,COL2,...] [--skip-invalid] [--skip-empty] [--invalid-verdict ungraded|tie]``
(data: :mod:`.data`).
One unit = one labelled item (graph ``graphs/judgecheck.py``): the real judging step of a protocol
(:mod:`nodes.judgecheck.judges`) judges it with each judge model (the evaluator role, or each ``--jury``
member), ``repeats`` times, a pair in both orders.
Metrics in :mod:`.metrics` (agreement and per-label precision / recall / F1 with bootstrap intervals, swap
and repeat consistency, jury vs members, cost per item), report blocks in :mod:`.report`. Judges are keyed
``m0``, ``m1``, ... (the paths of ``--fail-under`` and ``--compare``) and named by their model (``name``).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from dyneval.protocols.judgecheck import metrics
from dyneval.protocols.judgecheck.data import CANONICAL, load_labelled, sample_path, split_columns
from dyneval.protocols.judgecheck.report import report_blocks
from dyneval.results.view.adapters import JUDGECHECK
from dyneval.runtime.protocol import Protocol, Run, Unit, with_results
from dyneval.state.blocks import Block
from dyneval.state.config import parse_model_ref
from dyneval.state.context import described
from dyneval.state.errors import InfraError, InputError
from dyneval.state.judgecheck import ORDINAL, SCALES, JudgeCheckContext, check_jury, majority, split_label_map
from dyneval.stores.files import write_atomic

if TYPE_CHECKING:
    from langgraph.graph import StateGraph  # annotations only: `dyneval --help` does not load langgraph


#: What an unusable judge verdict counts as (``--invalid-verdict``).
InvalidVerdict = Literal["ungraded", "tie"]


@dataclass(kw_only=True)
class JudgeCheckBatch:
    """Batch-only options: the labelled set, its column names, the bootstrap."""

    labels: str | None = described(
        None,
        "human-labelled items (JSONL, JSON, CSV or TSV: question or input, "
        "response or output_1 + output_2, reference, category, label; ATAD: "
        "task, problem, level); "
        "default: the shipped sample for --judge",
    )
    fields: str | None = described(
        None, f"column names of --labels, e.g. label=Human,response=Answer (names: {', '.join(CANONICAL)})"
    )
    label_map: str | None = described(
        None,
        "label values of --labels mapped to the judge's labels, e.g. "
        "0=tie,1=1,2=2 (PandaLM); only the mapped values are accepted",
        check=split_label_map,
        metavar="VALUE=LABEL,...",
    )
    skip_invalid: bool = described(
        False,
        "leave out records of --labels that cannot be judged (an empty output, "
        "a boolean where text belongs, a label off the scale), counted per reason "
        "in the console, summary.json and the report",
    )
    skip_empty: bool = described(
        False,
        "leave out records whose answer (response, output_1 or output_2) is empty, counted; "
        "by default an empty answer is judged like any other",
    )
    label_vote: str | None = described(
        None,
        "the label is the majority of these annotator columns, e.g. annotator1,annotator2,annotator3; "
        "an item whose annotators tie is left out and counted",
        check=split_columns,
        metavar="COL1,COL2,...",
    )
    invalid_verdict: InvalidVerdict = described(
        "ungraded",
        "a verdict the judge could not give: ungraded (left out of every measure and counted) or, "
        "pairwise only, tie (as papers that count an unusable verdict as a tie do)",
    )
    bootstrap_resamples: int = described(
        1000, "bootstrap resamples of the items for each interval", minimum=100, maximum=100_000
    )


#: Where plan() keeps what it read of --labels (kept and skipped records), for the summary of a resumed run too.
LABELS_READ = "labels_read.json"


class JudgeCheckProtocol(Protocol):
    name = "judgecheck"
    viewer = JUDGECHECK
    description = (
        "Judge check: agreement of a judging step with human labels (accuracy, kappa, Spearman, "
        "per-label precision / recall / F1), "
        "position-swap and repeat consistency, juries, cost per judged item"
    )
    context_cls = JudgeCheckContext
    batch_cls = JudgeCheckBatch
    roles = ("evaluator",)

    def builder(self) -> StateGraph[Any, Any, Any, Any]:
        from dyneval.graphs.judgecheck import builder

        return builder

    def context(self, run: Run) -> JudgeCheckContext:
        """The graph context, as ``context_cls`` builds it (:meth:`Protocol.context`)."""
        ctx = super().context(run)
        assert isinstance(ctx, JudgeCheckContext)
        return ctx

    def plan(self, run: Run) -> list[Unit]:
        ctx, options = self.context(run), self.batch(run)
        check_jury(ctx.jury, run.config.models, "--jury")
        if options.invalid_verdict == "tie" and ctx.judge != "pairwise":
            raise InputError(
                f"--invalid-verdict tie needs --judge pairwise (the {ctx.judge} judge's scale has no tie)",
                field="--invalid-verdict",
            )
        if local := embedded_members(run):
            run.console.print(f"warning: {smoke_warning(local)}", style="bold yellow", markup=False, highlight=False)
        labelled = load_labelled(
            options.labels,
            ctx.judge,
            options.fields,
            aspect=ctx.aspect,
            label_map=options.label_map,
            skip_invalid=options.skip_invalid,
            skip_empty=options.skip_empty,
            label_vote=options.label_vote,
        )
        items = labelled.items
        run.console.print(f"labelled items: {self.inputs(run)}", markup=False, highlight=False)
        if labelled.skipped:
            run.console.print(
                f"{', '.join(labelled.flags)}: {skipped_line(labelled.summary())}",
                style="yellow",
                markup=False,
                highlight=False,
            )
        write_atomic(run.run_dir / LABELS_READ, json.dumps(labelled.summary(), indent=2))
        return [
            Unit(id=i.id, input={"item": i.model_dump()}, meta={"category": i.category, "label": i.label})
            for i in items
        ]

    def roles_in(self, run: Run) -> tuple[str, ...]:
        """A jury judges instead of the evaluator, which is then left out."""
        return () if self.context(run).jury else ("evaluator",)

    def inputs(self, run: Run) -> str:
        """Where the labels come from (the shipped sample only when no --labels was given)."""
        given = run.params.get("labels")
        return str(given) if given else f"shipped sample {sample_path(self.context(run).judge)} (no --labels given)"

    def expected_calls(self, run: Run) -> str:
        ctx = self.context(run)
        per = len(ctx.jury or [""]) * ctx.repeats * (2 if ctx.judge == "pairwise" and ctx.swap else 1)
        return f"{per} judge call(s) per item (+1 repair each when the reply is malformed)"

    def prepare(self, run: Run, units: list[Unit]) -> None:
        """Ping each jury member's endpoint once (the pre-flight ping of the roles leaves the jury out)."""
        from dyneval.prompts import load_prompt  # LangChain's prompt classes: not with `dyneval --help`

        seen: set[str] = set()
        for ref in self.context(run).jury or []:
            label = run.services.model_label("evaluator", ref)
            if label in seen:
                continue
            seen.add(label)
            try:
                run.services.model(ref, role="evaluator").text(load_prompt("common/ping").render(), step="preflight")
            except InfraError as exc:
                raise InputError(f"jury member {ref} ({label}) does not answer: {exc}", field="--jury") from None

    def ungraded(self, state: dict[str, Any]) -> int:
        """Verdicts the judge could not give (re-judged on resume)."""
        return sum(1 for v in state.get("verdicts", []) if v["value"] is None)

    def trials_refused(self, run: Run) -> str | None:
        return "judgecheck asks its judges again with --repeats N (their consistency is among its measures)"

    def result(self, unit: Unit, state: dict[str, Any]) -> dict[str, Any]:
        item = state["item"]
        return {
            "item_id": item["id"],
            "category": item.get("category", ""),
            "label": item["label"],
            "verdicts": state.get("verdicts", []),
            "jury": state.get("jury", []),
        }

    def summarize(self, run: Run, records: list[dict[str, Any]]) -> dict[str, Any]:
        ctx, options = self.context(run), self.batch(run)
        done = with_results(records)
        pairwise, ordinal = ctx.judge == "pairwise", ctx.judge in ORDINAL
        swapped = pairwise and ctx.swap
        found = observations(done, ordinal, options.invalid_verdict)
        names = display_names({key: model for key, (model, _) in found.items()})
        raters: dict[str, dict[str, Any]] = {}
        for key, (model, obs) in found.items():
            raters[key] = {
                "name": names[key],
                "model": model,
                "items": len(obs),
                "measures": metrics.measures(
                    obs,
                    pairwise=pairwise,
                    swapped=swapped,
                    ordinal=ordinal,
                    resamples=options.bootstrap_resamples,
                    seed=run.config.seed,
                ),
                "per_class": {
                    order: metrics.per_class(
                        obs, SCALES[ctx.judge], order=order, resamples=options.bootstrap_resamples, seed=run.config.seed
                    )
                    for order in (("original", "swapped") if swapped else ("original",))
                },
                "confusion": metrics.confusion(obs, SCALES[ctx.judge]),
                "by_category": metrics.by_category(
                    obs, swapped=swapped, resamples=options.bootstrap_resamples, seed=run.config.seed
                ),
                "cost": metrics.cost(obs),
            }
        for r in done:  # how each verdict came about: judge (pairwise: the position it picked), code, ungraded
            for v in r["verdicts"]:
                how = raters[f"m{v['member']}"].setdefault("decided_by", {})
                how[v["how"]] = how.get(v["how"], 0) + 1
        local = embedded_members(run)
        read = run.run_dir / LABELS_READ
        summary = {
            "judge": ctx.judge,
            "inputs": {"labels": self.inputs(run)},
            "labels_read": json.loads(read.read_text(encoding="utf-8")) if read.is_file() else None,
            "label_map": options.label_map,
            "label_vote": options.label_vote,
            "invalid_verdict": options.invalid_verdict,
            "jury": {f"m{i}": run.services.model_label("evaluator", ref) for i, ref in enumerate(ctx.jury or [])},
            "jury_smoke_test": smoke_warning(local) if local else None,
            "items": len(done),
            "scale": list(SCALES[ctx.judge]),
            "repeats": ctx.repeats,
            "orders": 2 if swapped else 1,
            "raters": raters,
        }
        summary["intervals"] = headline_intervals(summary)
        return summary

    def report(self, run: Run, summary: dict[str, Any], records: list[dict[str, Any]]) -> list[Block]:
        m = summary.get("metrics", {})
        if not m:
            return []
        found = observations(with_results(records), m.get("judge") in ORDINAL, m.get("invalid_verdict", "ungraded"))
        return report_blocks(run, m, found)


def display_names(models: dict[str, str]) -> dict[str, str]:
    """Rater key (``m0``, ``m0-vote``, ``jury``) -> how a person knows it: the judge's model (a model judging
    twice in one jury gets its key beside it), ``jury (majority of N)`` for the jury."""
    seen = Counter(models.values())
    return {
        key: f"jury ({model})" if key == "jury" else model if seen[model] == 1 else f"{model} ({key})"
        for key, model in models.items()
    }


def headline_intervals(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each headline metric's 95 % interval (:func:`results.view.adapters.interval_of`'s shape), keyed by its
    path with ``*`` expanded, with the method :func:`metrics.intervals` chose."""
    from dyneval.results.view.adapters import adapter, dig
    from dyneval.results.view.data import headline_metrics

    out = {}
    for h in headline_metrics(adapter("judgecheck"), summary):
        m = dig(summary, h["path"].removesuffix(".value"))
        if isinstance(m, dict) and (m.get("low") is not None or m.get("note")):  # withheld: the reason shown
            out[h["path"]] = {
                "estimate": m["value"],
                "low": m.get("low"),
                "high": m.get("high"),
                "n": m["n"],
                "level": 0.95,
                "method": m.get("method"),
                **({"note": m["note"]} if m.get("note") else {}),
            }
    return out


def skipped_line(read: dict[str, Any]) -> str:
    """``61 of 999 records skipped (response1 empty: 29, ...); 938 kept``: the console's line on --skip-invalid."""
    reasons = ", ".join(f"{why}: {n}" for why, n in read["skipped_by_reason"].items())
    return f"{read['skipped']} of {read['read']} records skipped ({reasons}); {read['kept']} kept"


def embedded_members(run: Run) -> list[str]:
    """The jury members served by the embedded model (their verdicts are a smoke test)."""
    jury = run.params.get("jury") or []
    return [f"m{i}" for i, ref in enumerate(jury) if parse_model_ref(ref, run.config.models).provider == "embedded"]


def smoke_warning(members: list[str]) -> str:
    """The runner's smoke-test warning, for jury members served by the embedded model."""
    from dyneval.runtime.runner import SMOKE_TEST_WARNING  # the runner's module is only needed for this text

    return SMOKE_TEST_WARNING.format(roles="jury member " + ", ".join(members))


def observations(
    records: list[dict[str, Any]], ordinal: bool, invalid: str = "ungraded"
) -> dict[str, tuple[str, list[metrics.Obs]]]:
    """Rater name -> (model label, one :class:`metrics.Obs` per item): each judge model (and, with repeats, the
    majority of its repeats: a self-consistency jury), then the jury of the models. ``invalid`` = ``tie``
    (``--invalid-verdict tie``): a verdict the judge could not give counts as a tie (a jury's when no member gave
    one; a member without one does not vote), for reproducing a paper that counts an unusable verdict so."""
    unusable = "tie" if invalid == "tie" else None
    raters: dict[str, tuple[str, list[metrics.Obs]]] = {}
    by_member: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        for v in r["verdicts"]:
            by_member[v["member"]].append(v)
    for member in sorted(by_member):
        model = by_member[member][0]["model"]
        obs = []
        for r in records:
            mine = [v for v in r["verdicts"] if v["member"] == member]
            obs.append(
                metrics.Obs(
                    r["item_id"],
                    r["category"],
                    r["label"],
                    {(v["repeat"], v["order"]): v["value"] or unusable for v in mine},
                    {(v["repeat"], v["order"]): float(v["value"]) for v in mine if ordinal and v["value"] is not None},
                    {(v["repeat"], v["order"]): v["reason"] for v in mine},
                    _cost(mine),
                )
            )
        raters[f"m{member}"] = (model, obs)
        repeats = 1 + max(v["repeat"] for v in by_member[member])
        if repeats > 1:
            raters[f"m{member}-vote"] = (f"{model}, majority of its {repeats} repeats", [_vote(o) for o in obs])
    if any(r.get("jury") for r in records):
        obs = [
            metrics.Obs(
                r["item_id"],
                r["category"],
                r["label"],
                {(j["repeat"], j["order"]): j["value"] or unusable for j in r["jury"]},
                {(j["repeat"], j["order"]): j.get("score") for j in r["jury"] if ordinal},
                {(j["repeat"], j["order"]): "votes: " + ", ".join(str(x) for x in j["votes"]) for j in r["jury"]},
                _cost(r["verdicts"]),
            )
            for r in records
        ]
        raters["jury"] = (f"majority of {len(by_member)}", obs)
    return raters


def _vote(o: metrics.Obs) -> metrics.Obs:
    """One judge's repeats combined like a jury: per order the majority value (``split`` without one) and, on a
    scale, the mean score of the graded repeats."""
    values: dict[metrics.Key, str | None] = {}
    scores: dict[metrics.Key, float | None] = {}
    for order in sorted({od for _, od in o.values}):
        values[0, order] = majority([v for (_, od), v in sorted(o.values.items()) if od == order])
        graded = [s for (_, od), s in o.scores.items() if od == order and s is not None]
        if graded:
            scores[0, order] = sum(graded) / len(graded)
    return metrics.Obs(o.id, o.category, o.label, values, scores, {}, o.cost)


def _cost(verdicts: list[dict[str, Any]]) -> dict[str, float]:
    return {k: sum(v["cost"][k] for v in verdicts) for k in ("calls", "tokens", "seconds")}
