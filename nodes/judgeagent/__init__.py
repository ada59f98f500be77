"""JudgeAgent nodes (seed 000): benchmark grading, interactive extension, evaluation feedback, validation.

Modules by role: :mod:`.knowledge` (context graph, entities, path sampling), :mod:`.grading` (base questions
and the difficulty score), :mod:`.extension` (question generation, target answer, judgement), :mod:`.feedback`
(Table 13), :mod:`.validation` (Algorithm 2 / Table 14); :mod:`.judging` and :mod:`.common` hold shared checks.
"""
