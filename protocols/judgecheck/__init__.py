"""Judge check: how well a protocol's judging step agrees with human labels, before a run trusts it.

``dyneval --protocol judgecheck --judge NAME --labels FILE [--jury MODEL ...] [--repeats K]``.
One unit = one labelled item (graph ``graphs/judgecheck.py``): the real judging step of a protocol
(:mod:`nodes.judgecheck.judges`) judges it with each judge model (the evaluator role, or each ``--jury``
member), ``repeats`` times, a pair in both orders.
Metrics in :mod:`.metrics` (agreement with bootstrap intervals, swap and repeat consistency, jury vs
members, cost per item), report blocks in :mod:`.report`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dyneval.protocols.judgecheck import metrics
from dyneval.protocols.judgecheck.data import CANONICAL, load_items, sample_path
from dyneval.protocols.judgecheck.report import report_blocks
from dyneval.runtime.protocol import Protocol, Run, Unit, with_results
from dyneval.runtime.report import Block
from dyneval.state.config import parse_model_ref
from dyneval.state.context import described
from dyneval.state.errors import InfraError, InputError
from dyneval.state.judgecheck import ORDINAL, SCALES, JudgeCheckContext, check_jury, majority

if TYPE_CHECKING:
    from langgraph.graph import StateGraph  # annotations only: `dyneval --help` does not load langgraph


@dataclass(kw_only=True)
class JudgeCheckBatch:
    """Batch-only options: the labelled set, its column names, the bootstrap."""

    labels: str | None = described(None, "human-labelled items (JSONL, JSON, CSV or TSV: question or input, "
                                         "response or output_1 + output_2, reference, category, label; ATAD: "
                                         "task, problem, level); "
                                         "default: the shipped sample for --judge")
    fields: str | None = described(None, f"column names of --labels, e.g. label=Human,response=Answer "
                                         f"(names: {', '.join(CANONICAL)})")
    bootstrap_resamples: int = described(1000, "bootstrap resamples of the items for each interval", minimum=100,
                                         maximum=100_000)


class JudgeCheckProtocol(Protocol):
    name = "judgecheck"
    description = ("Judge check: agreement of a judging step with human labels (accuracy, kappa, Spearman), "
                   "position-swap and repeat consistency, juries, cost per judged item")
    context_cls = JudgeCheckContext
    batch_cls = JudgeCheckBatch
    roles = ("evaluator",)

    def builder(self) -> StateGraph:
        from dyneval.graphs.judgecheck import builder

        return builder

    def plan(self, run: Run) -> list[Unit]:
        ctx, options = self.context(run), self.batch(run)
        check_jury(ctx.jury, run.config.models, "--jury")
        if local := embedded_members(run):
            run.console.print(f"warning: {smoke_warning(local)}", style="bold yellow", markup=False,
                              highlight=False)
        items = load_items(options.labels, ctx.judge, options.fields, aspect=ctx.aspect)
        run.console.print(f"labelled items: {self.inputs(run)}", markup=False, highlight=False)
        return [Unit(id=i.id, input={"item": i.model_dump()}, meta={"category": i.category, "label": i.label})
                for i in items]

    def custom_run(self, run: Run) -> bool:
        """No other mode; this only settles the roles before the pre-flight ping and the smoke-test warning (a
        resumed run does not plan again): a jury judges instead of the evaluator, which is then left out."""
        self.roles = () if self.context(run).jury else ("evaluator",)
        return False

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

    def result(self, unit: Unit, state: dict[str, Any]) -> dict[str, Any]:
        item = state["item"]
        return {"item_id": item["id"], "category": item.get("category", ""), "label": item["label"],
                "verdicts": state.get("verdicts", []), "jury": state.get("jury", [])}

    def summarize(self, run: Run, records: list[dict[str, Any]]) -> dict[str, Any]:
        ctx, options = self.context(run), self.batch(run)
        done = with_results(records)
        pairwise, ordinal = ctx.judge == "pairwise", ctx.judge in ORDINAL
        swapped = pairwise and ctx.swap
        raters = {}
        for name, (model, obs) in observations(done, ordinal).items():
            raters[name] = {
                "model": model, "items": len(obs),
                "measures": metrics.measures(obs, pairwise=pairwise, swapped=swapped, ordinal=ordinal,
                                             resamples=options.bootstrap_resamples, seed=run.config.seed),
                "confusion": metrics.confusion(obs, SCALES[ctx.judge]),
                "by_category": metrics.by_category(obs, swapped=swapped, resamples=options.bootstrap_resamples,
                                                   seed=run.config.seed),
                "cost": metrics.cost(obs),
            }
        for r in done:  # how each verdict came about: judge (pairwise: the position it picked), code, ungraded
            for v in r["verdicts"]:
                how = raters[f"m{v['member']}"].setdefault("decided_by", {})
                how[v["how"]] = how.get(v["how"], 0) + 1
        local = embedded_members(run)
        return {"judge": ctx.judge, "inputs": {"labels": self.inputs(run)},
                "jury": {f"m{i}": run.services.model_label("evaluator", ref) for i, ref in enumerate(ctx.jury or [])},
                "jury_smoke_test": smoke_warning(local) if local else None,
                "items": len(done), "scale": list(SCALES[ctx.judge]), "repeats": ctx.repeats,
                "orders": 2 if swapped else 1, "raters": raters}

    def report(self, run: Run, summary: dict[str, Any], records: list[dict[str, Any]]) -> list[Block]:
        m = summary.get("metrics", {})
        return report_blocks(run, m, observations(with_results(records), m.get("judge") in ORDINAL)) if m else []


def embedded_members(run: Run) -> list[str]:
    """The jury members served by the embedded model (their verdicts are a smoke test)."""
    jury = run.params.get("jury") or []
    return [f"m{i}" for i, ref in enumerate(jury) if parse_model_ref(ref, run.config.models).provider == "embedded"]


def smoke_warning(members: list[str]) -> str:
    """The runner's smoke-test warning, for jury members served by the embedded model."""
    from dyneval.runtime.runner import SMOKE_TEST_WARNING  # the runner's module is only needed for this text

    return SMOKE_TEST_WARNING.format(roles="jury member " + ", ".join(members))


def observations(records: list[dict[str, Any]], ordinal: bool) -> dict[str, tuple[str, list[metrics.Obs]]]:
    """Rater name -> (model label, one :class:`metrics.Obs` per item): each judge model (and, with repeats, the
    majority of its repeats: a self-consistency jury), then the jury of the models."""
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
            obs.append(metrics.Obs(
                r["item_id"], r["category"], r["label"], {(v["repeat"], v["order"]): v["value"] for v in mine},
                {(v["repeat"], v["order"]): float(v["value"]) for v in mine if ordinal and v["value"] is not None},
                {(v["repeat"], v["order"]): v["reason"] for v in mine}, _cost(mine)))
        raters[f"m{member}"] = (model, obs)
        repeats = 1 + max(v["repeat"] for v in by_member[member])
        if repeats > 1:
            raters[f"m{member}-vote"] = (f"{model}, majority of its {repeats} repeats", [_vote(o) for o in obs])
    if any(r.get("jury") for r in records):
        obs = [metrics.Obs(r["item_id"], r["category"], r["label"],
                           {(j["repeat"], j["order"]): j["value"] for j in r["jury"]},
                           {(j["repeat"], j["order"]): j.get("score") for j in r["jury"] if ordinal},
                           {(j["repeat"], j["order"]): "votes: " + ", ".join(str(x) for x in j["votes"])
                            for j in r["jury"]}, _cost(r["verdicts"]))
               for r in records]
        raters["jury"] = (f"majority of {len(by_member)}", obs)
    return raters


def _vote(o: metrics.Obs) -> metrics.Obs:
    """One judge's repeats combined like a jury: per order the majority value (``split`` without one) and, on a
    scale, the mean score of the graded repeats."""
    values, scores = {}, {}
    for order in sorted({od for _, od in o.values}):
        values[0, order] = majority([v for (_, od), v in sorted(o.values.items()) if od == order])
        graded = [s for (_, od), s in o.scores.items() if od == order and s is not None]
        if graded:
            scores[0, order] = sum(graded) / len(graded)
    return metrics.Obs(o.id, o.category, o.label, values, scores, {}, o.cost)


def _cost(verdicts: list[dict[str, Any]]) -> dict[str, float]:
    return {k: sum(v["cost"][k] for v in verdicts) for k in ("calls", "tokens", "seconds")}
