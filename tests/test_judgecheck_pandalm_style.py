"""Judge check on PandaLM-style pairwise data: PandaLM's test set (WeOpenML/PandaLM, data/testset-v1.json) marks
a tie ``0``, leaves some responses empty and holds a boolean where a response belongs. The records here are
written for this test in that shape (columns instruction, response1, response2, and a 0 / 1 / 2 label).

A run with ``--skip-invalid --skip-empty --label-map 0=tie,1=1,2=2`` against the stand-in judge keeps the valid pairs,
counts the skipped ones per reason (console, summary.json, report) and reports accuracy, kappa and per-label
precision / recall / F1 with intervals; without those flags each problem stops the run (exit 2) with one message
naming the file, record, field and what was found.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score, precision_recall_fscore_support

from dyneval.cli import main
from dyneval.protocols.judgecheck.data import load_labelled
from dyneval.protocols.judgecheck.metrics import Obs, per_class
from dyneval.results.view.adapters import adapter, dig, interval_of
from dyneval.results.view.data import headline_metrics
from dyneval.state.errors import InputError
from tests.fakes import ScriptedChat
from tests.standin_endpoint import StandIn
from tests.test_judgecheck import _execute

FIELDS = "question=instruction,output_1=response1,output_2=response2,label=gold"
TOPICS = [
    "name three rivers in Europe",
    "explain what a prime number is",
    "give a synonym for quick",
    "convert 5 km to miles",
    "write a haiku about rain",
    "list two uses of copper",
    "say why the sky looks blue",
    "suggest a title for a cooking blog",
    "define photosynthesis briefly",
    "name a mammal that lays eggs",
    "translate 'good morning' into Spanish",
    "sum the numbers 4, 9 and 12",
]


def pairs() -> list[dict]:
    """Twelve valid pairs (labels 0, 1, 2 in turn), then two with an empty second response and one whose first
    response is the boolean true (records 13, 14 and 15)."""
    out = [
        {
            "idx": i,
            "instruction": topic,
            "response1": f"First attempt at: {topic}.",
            "response2": f"A second, longer attempt at: {topic}, with more detail.",
            "gold": i % 3,
        }
        for i, topic in enumerate(TOPICS)
    ]
    out.append(
        {
            "idx": 12,
            "instruction": "describe a lighthouse",
            "response1": "A tall tower with a lamp.",
            "response2": "",
            "gold": 1,
        }
    )
    out.append(
        {"idx": 13, "instruction": "recommend a board game", "response1": "Chess.", "response2": "   ", "gold": 0}
    )
    out.append(
        {"idx": 14, "instruction": "is water wet?", "response1": True, "response2": "It makes things wet.", "gold": 2}
    )
    return out


def write(path, records) -> str:
    path.write_text(json.dumps(records, indent=1), encoding="utf-8")
    return str(path)


@pytest.fixture
def pandalm_run(tmp_path, capsys):
    labels = write(tmp_path / "pandalm_style.json", pairs())
    with StandIn() as standin:
        rc = main(
            [
                "--protocol",
                "judgecheck",
                "--judge",
                "pairwise",
                "--labels",
                labels,
                "--fields",
                FIELDS,
                "--skip-invalid",
                "--skip-empty",
                "--label-map",
                "0=tie,1=1,2=2",
                "--evaluator",
                standin.spec("panda-judge"),
                "--out",
                str(tmp_path / "runs"),
                "--bootstrap-resamples",
                "200",
            ]
        )
    console = capsys.readouterr().out
    assert rc == 0
    run_dir = next(p for p in (tmp_path / "runs").iterdir() if p.is_dir())
    summary = json.loads((run_dir / "summary.json").read_text())
    records = sorted(
        (json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()), key=lambda r: r["item_id"]
    )  # item0001 ... item0012: the file's order
    return summary, records, (run_dir / "report.md").read_text(), console


def test_skip_invalid_leaves_out_empty_and_boolean_outputs_and_counts_each_reason(pandalm_run):
    summary, records, report, console = pandalm_run
    read = summary["metrics"]["labels_read"]
    assert (read["read"], read["kept"], read["skipped"]) == (15, 12, 3)
    assert read["skipped_by_reason"] == {"response2 empty": 2, "response1: a boolean, expected text": 1}
    assert len(read["skipped_examples"]) == 3 and "record 15" in read["skipped_examples"][2]
    assert summary["units"] == 12 and len(records) == 12
    assert (
        "--skip-empty, --skip-invalid: 3 of 15 records skipped (response2 empty: 2, response1: a boolean, expected "
        "text: 1)" in " ".join(console.split())
    )
    assert (
        "15 read, 12 kept, 3 skipped with --skip-empty, --skip-invalid (response2 empty: 2; response1: a boolean"
        in (report)
    )


def test_label_map_turns_pandalms_zero_into_a_tie(pandalm_run):
    _, records, report, _ = pandalm_run
    assert [r["label"] for r in records] == [{0: "tie", 1: "1", 2: "2"}[i % 3] for i in range(12)]
    assert "Label values mapped with --label-map 0=tie,1=1,2=2" in report


def test_summary_and_report_give_accuracy_kappa_and_per_label_scores_equal_to_scikit_learn(pandalm_run):
    summary, records, report, _ = pandalm_run
    rater = summary["metrics"]["raters"]["m0"]
    truth = [r["label"] for r in records]
    said = [next(v["value"] for v in r["verdicts"] if v["order"] == "original") for r in records]
    assert None not in said  # the stand-in always answers with a valid verdict
    assert rater["measures"]["accuracy_original"]["value"] == np.mean([a == b for a, b in zip(truth, said)])
    assert rater["measures"]["kappa_original"]["value"] == pytest.approx(cohen_kappa_score(truth, said))
    p, r, f, support = precision_recall_fscore_support(truth, said, labels=["1", "2", "tie"], zero_division=np.nan)
    for i, label in enumerate(["1", "2", "tie"]):
        got = rater["per_class"]["original"][label]
        for name, expected in (("precision", p[i]), ("recall", r[i]), ("f1", f[i])):
            assert got[name]["value"] == (None if np.isnan(expected) else pytest.approx(expected))
            assert got[name]["n"] == 12
        assert got["support"] == support[i] == 4
    macro = precision_recall_fscore_support(truth, said, labels=["1", "2", "tie"], average="macro", zero_division=0)
    assert rater["per_class"]["original"]["macro"]["f1"]["value"] == pytest.approx(macro[2])
    assert "swapped" in rater["per_class"]  # both orders were judged
    assert "precision, recall and F1 per label (original order" in report
    assert "kappa original" in report and "accuracy original" in report


def test_every_headline_metric_has_an_interval_and_names_the_judge_by_its_model(pandalm_run):
    summary, _, report, console = pandalm_run
    metrics = summary["metrics"]
    model = metrics["raters"]["m0"]["model"]
    assert "panda-judge" in model and metrics["raters"]["m0"]["name"] == model
    head = headline_metrics(adapter("judgecheck"), metrics)
    assert [h["name"] for h in head] == [
        f"Accuracy of judge {model} (mean of both orders)",
        f"Accuracy of judge {model} (original order)",
        f"Cohen's kappa of judge {model} (original order)",
        f"Swap consistency of judge {model}",
        f"Macro F1 of judge {model}",
    ]
    for h in head:
        interval = interval_of(metrics, h["path"])
        assert interval is not None, h["path"]
        kind = h["path"].split(".")[-2]
        if interval["low"] is None:  # a macro average while a class has under three labels: withheld, said why
            assert kind == "f1" and "fewer than 3 labels" in interval["note"], interval
            continue
        assert interval["estimate"] == h["value"] and interval["low"] <= h["value"] <= interval["high"]
        shares = {"accuracy_original": "clopper-pearson", "swap_consistency": "clopper-pearson"}
        method = shares | {"accuracy_mean": "clopper-pearson-clustered"}
        assert (interval["level"], interval["method"]) == (0.95, method.get(kind, "bca-bootstrap"))
        assert interval["n"] == 12
    assert f"### {model}" in report and "### m0" not in report


def test_a_missing_output_without_skip_invalid_exits_2_naming_file_record_field_and_missing(tmp_path, capsys):
    # an empty output is an item (tests/test_judgecheck_pairwise_data.py); a column the record lacks is an error
    labels = write(tmp_path / "pairs.json", [{k: v for k, v in r.items() if k != "response2"} for r in pairs()[12:14]])
    rc = main(
        [
            "--protocol",
            "judgecheck",
            "--judge",
            "pairwise",
            "--labels",
            labels,
            "--fields",
            FIELDS,
            "--label-map",
            "0=tie,1=1,2=2",
            "--out",
            str(tmp_path / "runs"),
            "--dry-run",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2
    assert f"{labels}, record 1, field 'response2': (as output_2) missing" in err
    assert "--skip-invalid" in err and "--labels" in err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # nothing created


def test_a_boolean_output_is_refused_with_what_was_found(tmp_path, capsys):
    labels = write(tmp_path / "pairs.json", pairs()[:2] + pairs()[14:])
    rc = main(
        [
            "--protocol",
            "judgecheck",
            "--judge",
            "pairwise",
            "--labels",
            labels,
            "--fields",
            FIELDS,
            "--label-map",
            "0=tie,1=1,2=2",
            "--out",
            str(tmp_path / "runs"),
            "--dry-run",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2
    assert f"{labels}, record 3, field 'response1': (as output_1) expected text, got a boolean (true)" in err


def test_a_zero_label_needs_a_map_and_a_bad_map_names_the_flag(tmp_path, capsys):
    labels = write(tmp_path / "pairs.json", pairs()[:3])
    base = [
        "--protocol",
        "judgecheck",
        "--judge",
        "pairwise",
        "--labels",
        labels,
        "--fields",
        FIELDS,
        "--out",
        str(tmp_path / "runs"),
        "--dry-run",
    ]
    assert main(base) == 2
    err = capsys.readouterr().err
    assert "record 1, field 'gold'" in err and "got '0'" in err and "--label-map VALUE=LABEL" in err
    assert main([*base, "--label-map", "0=draw,1=1,2=2"]) == 2  # draw is no label of the pairwise judge
    err = capsys.readouterr().err
    assert "--label-map" in err and "'0=draw,1=1,2=2'" in err and "1, 2, tie" in err
    assert main([*base, "--label-map", "0tie"]) == 2  # no '='
    assert "--label-map" in capsys.readouterr().err
    assert main([*base, "--label-map", "1=1,2=2"]) == 2  # 0 is not mapped: not guessed
    assert "'0' is not a value of --label-map (it maps 1, 2)" in " ".join(capsys.readouterr().err.split())


def test_per_label_scores_equal_scikit_learn_on_hand_made_labels_and_a_label_never_chosen_has_no_precision():
    truth = ["1", "1", "1", "2", "2", "tie", "tie", "1", "2", "tie"]
    said = ["1", "2", "1", "2", "1", "1", "2", "1", "2", "split"]  # never "tie"; a jury split misses its label
    obs = [Obs(f"i{k}", "", t, {(0, "original"): s}) for k, (t, s) in enumerate(zip(truth, said))]
    got = per_class(obs, ("1", "2", "tie"), resamples=200, seed=0)
    p, r, f, support = precision_recall_fscore_support(truth, said, labels=["1", "2", "tie"], zero_division=np.nan)
    assert got["1"]["precision"]["value"] == pytest.approx(p[0]) == 3 / 5  # 3 of the 5 "1" verdicts
    assert got["1"]["recall"]["value"] == pytest.approx(r[0]) == 3 / 4  # 3 of the 4 "1" labels
    assert got["2"]["f1"]["value"] == pytest.approx(f[1])
    assert got["tie"]["precision"]["value"] is None and np.isnan(p[2])  # never chosen: undefined, not 0
    assert got["tie"]["recall"]["value"] == 0 and got["tie"]["chosen"] == 0 and got["tie"]["support"] == 3
    macro = precision_recall_fscore_support(truth, said, labels=["1", "2", "tie"], average="macro", zero_division=0)
    for i, name in enumerate(("precision", "recall", "f1")):
        assert got["macro"][name]["value"] == pytest.approx(macro[i])
    for label in ("1", "2"):
        m = got[label]["f1"]
        assert m["low"] <= m["value"] <= m["high"] and m["n"] == 10


EVERY_REPLY = {
    "winner": "A",
    "reason": "fine",
    "rating": 2,
    "correct": True,
    "error_type": "N/A",
    "facts": [],
    "complete": True,
    "approved": True,
    "feedback": "",
    "validity": 5,
    "coherence": 3,
    "fairness": 1,
}
HEADLINE = {
    "pointwise": ["Accuracy of judge {m}", "Cohen's kappa of judge {m}", "Macro F1 of judge {m}"],
    "pairwise": [
        "Accuracy of judge {m} (mean of both orders)",
        "Accuracy of judge {m} (original order)",
        "Cohen's kappa of judge {m} (original order)",
        "Swap consistency of judge {m}",
        "Macro F1 of judge {m}",
    ],
    "pairwise, one order": [
        "Accuracy of judge {m} (original order)",
        "Cohen's kappa of judge {m} (original order)",
        "Macro F1 of judge {m}",
    ],
}


@pytest.mark.parametrize(
    ("judge", "params", "kind"),
    [
        ("pairwise", {}, "pairwise"),
        ("pairwise", {"swap": False}, "pairwise, one order"),
        ("llmeval.judge", {}, "pointwise"),
        ("interview.grader", {}, "pointwise"),
        ("judgeagent.judge", {}, "pointwise"),
        ("atad.orchestrator", {}, "pointwise"),
        ("atad.reviewer", {}, "pointwise"),
    ],
)
def test_every_judge_mode_has_headline_metrics_each_with_its_interval(tmp_path, judge, params, kind):
    _, summary = _execute(
        tmp_path,
        {"judge": judge, **params},
        {"evaluator": ScriptedChat(lambda m, tool: EVERY_REPLY if tool else "pong")},
    )
    metrics = summary["metrics"]
    head = headline_metrics(adapter("judgecheck"), metrics)
    assert [h["name"] for h in head] == [x.replace("{m}", "fake:evaluator") for x in HEADLINE[kind]]
    for h in head:
        interval = interval_of(metrics, h["path"])
        assert interval is not None and interval["n"] == dig(metrics, h["path"].removesuffix(".value"))["n"] > 0


def test_skip_invalid_counts_a_number_output_a_missing_output_and_an_unmapped_label_each_under_its_reason(tmp_path):
    good = pairs()[:2]
    bad = [
        good[0] | {"response2": 42},
        {k: v for k, v in good[1].items() if k != "response2"},
        good[0] | {"gold": 7},
        good[1] | {"response1": 2.5},
    ]
    path = write(tmp_path / "pairs.json", good + bad)
    got = load_labelled(path, "pairwise", FIELDS, label_map="0=tie,1=1,2=2", skip_invalid=True)
    assert [i.label for i in got.items] == ["tie", "1"]
    assert got.skipped == {
        "response2: a number, expected text": 1,
        "response2 missing": 1,
        "response1: a number, expected text": 1,
        "gold: (as label) '7' is not a value of --label-map (it maps 0, 1, 2)": 1,
    }
    assert got.summary()["read"] == 6 and got.summary()["skipped"] == 4
    with pytest.raises(InputError) as refused:  # the same file without --skip-invalid: the first bad record
        load_labelled(path, "pairwise", FIELDS, label_map="0=tie,1=1,2=2")
    assert "record 3, field 'response2': (as output_2) expected text, got a number (42)" in str(refused.value)
