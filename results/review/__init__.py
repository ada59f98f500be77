"""The review page: a stratified sample of a finished run's judged items, labelled by people (``dyneval --review``).

:mod:`.items` reads the judged items from the run folder, :mod:`.sample` draws the stratified sample and its order,
:mod:`.labels` keeps each reviewer's labels (judgecheck's labels format) and the agreement between reviewers,
:mod:`.server` serves the page, :mod:`.command` is the command line.
"""
