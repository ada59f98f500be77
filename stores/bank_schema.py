"""The llmeval question bank's tables (SQLAlchemy Core), created by :class:`stores.question_bank.QuestionBank`:

* ``llmeval_questions``: UUID, discipline, sub-discipline, question type, question,
  answer, explanation, source, created-at, a normalised content hash, the parent
  UUID of augmented variants (appendix A.2) and an ``active`` flag.
* ``llmeval_sessions``: one exam session (model, paradigm, seed, size, cycle,
  few-shot example ids, mirror-of for reference-model replays, final scores).
* ``llmeval_items``: the fixed, ordered question list of a session with the
  quota state of every slot (``allocated`` -> ``pending`` -> ``completed``), the
  examinee's answer and the judge's stars and reason.
* ``llmeval_examinees``: the exam server's registered examinees (name -> session).
* ``llmeval_meta``: the bank's own id (which scopes its near-duplicate index) and the
  state of its sampling places and imports; never the exam server's signing secret (a
  bank may be copied or shared: :meth:`QuestionBank.move_secret` takes out an old one).
* ``llmeval_item_params``: calibrated IRT parameters per question and model (1PL/2PL):
  discrimination, difficulty, the number of responses behind them and the fit date;
  ``llmeval_calibrations`` one row per fit (responses, examinees, star means).
* ``llmeval_adaptive``: the settings and the running ability estimate of an adaptive session,
  whose slots are appended one at a time (:meth:`QuestionBank.append_item`).
* ``llmeval_ranks``: derived from ``llmeval_questions``: each active question's place in UUID order, in the
  whole bank and within its discipline, so that a session is sampled by drawing places, without reading the
  bank (rebuilt after questions change; valid while ``llmeval_meta`` holds ``ranks``).
* ``llmeval_rates``: the exam server's request-rate token bucket per user, which all its processes draw on.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

questions = sa.Table(
    "llmeval_questions",
    metadata,
    sa.Column("uuid", sa.String(64), primary_key=True),
    sa.Column("discipline", sa.String(128), nullable=False, index=True),
    sa.Column("sub_discipline", sa.String(128), nullable=False, default=""),
    sa.Column("qtype", sa.String(32), nullable=False),
    sa.Column("question", sa.Text, nullable=False),
    sa.Column("options", sa.Text, nullable=False, default="[]"),  # JSON list (multiple choice only)
    sa.Column("answer", sa.Text, nullable=False),
    sa.Column("explanation", sa.Text, nullable=False, default=""),
    sa.Column("source", sa.String(256), nullable=False, default=""),
    sa.Column("created_at", sa.String(40), nullable=False),
    sa.Column("content_hash", sa.String(64), nullable=False, index=True),
    sa.Column("parent_uuid", sa.String(64), nullable=True),
    sa.Column("active", sa.Boolean, nullable=False, default=True),
)

sessions = sa.Table(
    "llmeval_sessions",
    metadata,
    sa.Column("session_id", sa.String(200), primary_key=True),
    sa.Column("model", sa.String(256), nullable=False, index=True),
    sa.Column("paradigm", sa.String(32), nullable=False),
    sa.Column("seed", sa.String(64), nullable=False),
    sa.Column("n", sa.Integer, nullable=False),
    sa.Column("stratified", sa.Boolean, nullable=False, default=False),
    sa.Column("cycle", sa.Integer, nullable=False, default=0),
    sa.Column("fewshot", sa.Text, nullable=False, default="[]"),
    sa.Column("mirror_of", sa.String(200), nullable=True),
    sa.Column("run_id", sa.String(200), nullable=False, default=""),
    sa.Column("owner", sa.String(200), nullable=True),  # examinee user id (exam server)
    sa.Column("created_at", sa.String(40), nullable=False),
    sa.Column("scores", sa.Text, nullable=True),  # JSON, written when scored
)

items = sa.Table(
    "llmeval_items",
    metadata,
    sa.Column("session_id", sa.String(200), sa.ForeignKey("llmeval_sessions.session_id"), primary_key=True),
    sa.Column("position", sa.Integer, primary_key=True),
    sa.Column("question_uuid", sa.String(64), sa.ForeignKey("llmeval_questions.uuid"), nullable=False),
    sa.Column("status", sa.String(16), nullable=False, default="allocated"),
    sa.Column("response", sa.Text, nullable=True),
    sa.Column("delivered_at", sa.String(40), nullable=True),
    sa.Column("answered_at", sa.String(40), nullable=True),
    sa.Column("stars", sa.Integer, nullable=True),
    sa.Column("reason", sa.Text, nullable=True),
    sa.Column("judge_status", sa.String(24), nullable=True),
    sa.UniqueConstraint("session_id", "question_uuid", name="uq_llmeval_item_question"),
)

examinees = sa.Table(  # exam-server users: one examinee name, one session (the admin is never an examinee)
    "llmeval_examinees",
    metadata,
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("session_id", sa.String(200), sa.ForeignKey("llmeval_sessions.session_id"), nullable=False, unique=True),
    sa.Column("created_at", sa.String(40), nullable=False),
)

meta = sa.Table(  # values that identify the bank or must survive a restart: bank id, ranks, pending imports
    "llmeval_meta",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

item_params = sa.Table(  # IRT calibration (nodes/llmeval/calibration.py); absent = uncalibrated
    "llmeval_item_params",
    metadata,
    sa.Column("question_uuid", sa.String(64), sa.ForeignKey("llmeval_questions.uuid"), primary_key=True),
    sa.Column("irt_model", sa.String(8), primary_key=True),  # 1pl / 2pl
    sa.Column("a", sa.Float, nullable=False),
    sa.Column("b", sa.Float, nullable=False),
    sa.Column("n_responses", sa.Integer, nullable=False),
    sa.Column("fitted_at", sa.String(40), nullable=False),
)

calibrations = sa.Table(  # one row per fit: what it was fitted on
    "llmeval_calibrations",
    metadata,
    sa.Column("irt_model", sa.String(8), primary_key=True),
    sa.Column("fitted_at", sa.String(40), primary_key=True),
    sa.Column("responses", sa.Integer, nullable=False),
    sa.Column("examinees", sa.Integer, nullable=False),
    sa.Column("items", sa.Integer, nullable=False),
    sa.Column("details", sa.Text, nullable=False, default="{}"),  # JSON: star means, iterations, min responses
)

adaptive = sa.Table(  # adaptive sessions: settings and the running ability estimate
    "llmeval_adaptive",
    metadata,
    sa.Column("session_id", sa.String(200), sa.ForeignKey("llmeval_sessions.session_id"), primary_key=True),
    sa.Column("irt_model", sa.String(8), nullable=False),
    sa.Column("target_se", sa.Float, nullable=False),
    sa.Column("max_items", sa.Integer, nullable=False),
    sa.Column("exposure_k", sa.Integer, nullable=False),
    sa.Column("theta", sa.Float, nullable=False, default=0.0),
    sa.Column("se", sa.Float, nullable=False, default=1.0),
    sa.Column("stopped", sa.String(40), nullable=True),  # why the session ended: target_se / max_items / bank
)

ranks = sa.Table(  # derived (rebuilt by QuestionBank after questions change): the active questions in UUID order
    "llmeval_ranks",
    metadata,
    sa.Column("uuid", sa.String(64), primary_key=True),
    sa.Column("rank", sa.Integer, nullable=False, unique=True),  # 0-based place among all active questions
    sa.Column("discipline", sa.String(128), nullable=False),
    sa.Column("drank", sa.Integer, nullable=False),  # 0-based place among the active questions of its discipline
    sa.Index("ix_llmeval_ranks_discipline_drank", "discipline", "drank", unique=True),
)

rates = sa.Table(  # the exam server's rate limit: one token bucket per user, shared by all its processes
    "llmeval_rates",
    metadata,
    sa.Column("key", sa.String(200), primary_key=True),
    sa.Column("tokens", sa.Float, nullable=False),
    sa.Column("stamp", sa.Float, nullable=False),  # Unix time of the bucket's last update
)
