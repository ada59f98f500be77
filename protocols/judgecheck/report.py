"""Report blocks of a judge check: what was read of the labels (records skipped, per reason), the verdict table
ordered by agreement, then a section per judge (and the jury), named by its model, with its measures and
intervals, per-label precision / recall / F1, confusion matrix figure, categories, swap-flip and repeat-flip
examples."""

from __future__ import annotations

from typing import Any

from dyneval.protocols.judgecheck.metrics import Obs, repeat_sets
from dyneval.results.report import figure_path, heatmap, scatter
from dyneval.runtime.protocol import Run
from dyneval.state.blocks import Block, Details, Figure, Heading, Table, Text

EXAMPLES = 5


def lead_measure(judge: str, orders: int) -> str:
    """The agreement that orders the verdict table (pairwise: the mean of both orders, as LLMBar reports)."""
    if judge != "pairwise":
        return "accuracy"
    return "accuracy_mean" if orders == 2 else "accuracy_original"


def cell(m: dict[str, Any] | None) -> str:
    """``0.795 [0.740, 0.850] (n=200, 1 ungraded)``; ``n/a`` when nothing was graded."""
    if not m:
        return ""
    if m.get("value") is None:
        text = "n/a"
    else:
        text = f"{m['value']:.3f}"
        if m.get("low") is not None:
            text += f" [{m['low']:.3f}, {m['high']:.3f}]"
    extra = f", {m['ungraded']} ungraded" if m.get("ungraded") else ""
    return f"{text} (n={m.get('n', 0)}{extra})" if "n" in m else text


def report_blocks(run: Run, m: dict[str, Any], obs: dict[str, tuple[str, list[Obs]]]) -> list[Block]:
    pairwise = m["judge"] == "pairwise"
    raters = m["raters"]
    blocks: list[Block] = [
        Text(
            f"Judging step {m['judge']} on {m['items']} labelled items from {m['inputs']['labels']}; "
            f"{m['repeats']} repeat(s), {m['orders']} order(s) per item. Intervals: 95 % over items (exact "
            "binomial for a share of one verdict per item, cluster-robust t with repeats, BCa bootstrap for "
            "kappa, rho and F1). Ungraded verdicts (no usable verdict after retries and one repair) are left out "
            "of every measure and counted; a jury split (no majority) counts as a miss."
        )
    ]
    if m.get("jury_smoke_test"):
        blocks.insert(0, Text("WARNING: " + m["jury_smoke_test"]))
    if m.get("labels_read"):
        blocks.append(_labels_read(m["labels_read"], m.get("label_map")))
    if m.get("jury"):
        blocks.append(Text("Jury (majority vote): " + ", ".join(f"{k} = {v}" for k, v in m["jury"].items()) + "."))
    if not raters:
        return [*blocks, Text("No item was judged.")]
    lead = lead_measure(m["judge"], m["orders"])
    order = sorted(
        raters,
        key=lambda name: (
            -1.0 if raters[name]["measures"][lead]["value"] is None else raters[name]["measures"][lead]["value"]
        ),
        reverse=True,
    )
    consistency = "swap_consistency" if m["orders"] == 2 else "repeat_consistency"
    kappa = "kappa_original" if pairwise else "kappa"
    blocks.append(
        Table(
            [
                "judge",
                "agreement",
                "kappa",
                "macro F1",
                consistency.replace("_", " "),
                "tokens / item",
                "seconds / item",
            ],
            [
                [
                    _name(raters, key),
                    cell(raters[key]["measures"][lead]),
                    cell(raters[key]["measures"].get(kappa)),
                    cell(((raters[key].get("per_class") or {}).get("original") or {}).get("macro", {}).get("f1")),
                    cell(raters[key]["measures"].get(consistency)),
                    raters[key]["cost"]["tokens_per_item"],
                    raters[key]["cost"]["seconds_per_item"],
                ]
                for key in order
            ],
            caption="Verdict table, ordered by agreement with the human labels (cost from the event log)",
        )
    )
    blocks.extend(_cost_figure(run, raters, lead, order))
    for key in order:
        blocks.extend(_section(run, key, _name(raters, key), raters[key], obs[key][1], pairwise, m["orders"] == 2))
    return blocks


def _name(raters: dict[str, Any], key: str) -> str:
    """A rater as a person knows it: its model (a summary written before names existed: its key and model)."""
    return raters[key].get("name") or f"{key}: {raters[key]['model']}"


def _labels_read(read: dict[str, Any], label_map: str | None) -> Text:
    """What was read of --labels: records kept and skipped (each reason with its count, first examples)."""
    text = f"Records of --labels: {read['read']} read, {read['kept']} kept"
    if read["skipped"]:
        text += (
            f", {read['skipped']} skipped with {', '.join(read.get('skipped_by') or ['--skip-invalid'])} ("
            + "; ".join(f"{why}: {n}" for why, n in read["skipped_by_reason"].items())
            + "). First skipped: "
            + " | ".join(read["skipped_examples"])
        )
    return Text(text + (f". Label values mapped with --label-map {label_map}." if label_map else "."))


def _cost_figure(run: Run, raters: dict[str, Any], lead: str, order: list[str]) -> list[Block]:
    """Agreement against tokens per judged item, one point per judge (and self-vote) and the jury, with the
    agreement's interval: the jury papers' quality-against-cost view. Drawn when two or more raters have an
    agreement (one point compares nothing; its cost is in the verdict table)."""
    points, errors = {}, {}
    for key in order:
        m, tokens, name = raters[key]["measures"][lead], raters[key]["cost"]["tokens_per_item"], _name(raters, key)
        if m["value"] is None or tokens is None:
            continue
        points[name] = (tokens, m["value"])
        if m.get("low") is not None:
            errors[name] = (m["low"], m["high"])
    if len(points) < 2:
        return []
    what = lead.replace("_", " ")
    path = scatter(
        figure_path(run.run_dir, "agreement_vs_cost"),
        points,
        errors=errors,
        title="Agreement with human labels against cost",
        xlabel="tokens per judged item (event log)",
        ylabel=what,
    )
    return [
        Figure(
            path,
            f"Agreement ({what}, 95 % bootstrap interval) against tokens per judged item: one point "
            "per judge and for the jury (its cost is the sum of its members')",
        )
    ]


def _section(
    run: Run, key: str, name: str, rater: dict[str, Any], obs: list[Obs], pairwise: bool, swapped: bool
) -> list[Block]:
    blocks: list[Block] = [
        Heading(name, 3),
        Table(
            ["measure", "value [95 % CI] (n)"],
            [[k.replace("_", " "), cell(v)] for k, v in rater["measures"].items()],
            caption=f"{name}: agreement with human labels",
        ),
    ]
    for order, classes in (rater.get("per_class") or {}).items():
        blocks.append(
            Table(
                ["label", "precision [95 % CI]", "recall [95 % CI]", "F1 [95 % CI]", "labelled", "chosen"],
                [
                    [
                        label,
                        cell(c["precision"]),
                        cell(c["recall"]),
                        cell(c["f1"]),
                        c.get("support", ""),
                        c.get("chosen", ""),
                    ]
                    for label, c in classes.items()
                ],
                caption=f"{name}: precision, recall and F1 per label ({order} order; n = graded verdicts; labelled = "
                "human labels of that value, chosen = verdicts of it; n/a = never chosen; macro: the mean over "
                "the labels, n/a counted 0)",
            )
        )
    if rater.get("decided_by"):
        what = (
            "judge:A / judge:B = it picked the output shown first / second"
            if pairwise
            else "the path the protocol's step took: judged / banded / exact / code / empty, ATAD's initial / "
            "scaled validation or reviewer; or ungraded"
        )
        blocks.append(
            Text(
                f"How the verdicts came about ({what}): "
                + ", ".join(f"{k} {v}" for k, v in sorted(rater["decided_by"].items()))
                + "."
            )
        )
    conf = rater["confusion"]
    path = heatmap(
        figure_path(run.run_dir, f"confusion_{key}"),
        [f"human {x}" for x in conf["labels"]],
        conf["columns"],
        conf["matrix"],
        title=f"{name}: human label (rows) vs verdict (columns)",
    )
    blocks.append(Figure(path, f"{name}: confusion matrix (original order, all repeats)"))
    cats = rater["by_category"]
    if len(cats) > 1:
        blocks.append(
            Table(
                ["category", "items", "agreement [95 % CI] (n)"],
                [[c, v["items"], cell(v)] for c, v in cats.items()],
                caption=f"{name}: by category",
            )
        )
    if swapped:
        flips = [
            o
            for o in obs
            for (r, od), v in sorted(o.values.items())
            if od == "original" and v is not None and o.values.get((r, "swapped")) not in (None, v)
        ]
        blocks.append(
            _examples(
                f"{name}: swap flips (a different winner once the outputs swap places)",
                flips,
                lambda o: [f"{k[1]} r{k[0]}: {v}" for k, v in sorted(o.values.items())],
            )
        )
    flips = [o for od in ("original", "swapped") for o, vs in repeat_sets(obs, od) if len(set(vs)) > 1]
    if flips:
        blocks.append(
            _examples(
                f"{name}: repeat flips (verdicts differ between repeats)",
                flips,
                lambda o: [f"{k[1]} r{k[0]}: {v}" for k, v in sorted(o.values.items())],
            )
        )
    return blocks


def _examples(title: str, flips: list[Obs], show: Any) -> Details:
    unique = list({o.id: o for o in flips}.values())
    if not unique:
        return Details(title, [Text("None.")])
    rows = [
        [o.id, o.label, "; ".join(show(o)), " | ".join(r for r in o.reasons.values() if r)[:400]]
        for o in unique[:EXAMPLES]
    ]
    return Details(f"{title}: {len(unique)} item(s)", [Table(["item", "human", "verdicts", "reasons"], rows)])
