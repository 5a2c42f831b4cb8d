"""What the Lab dialog makes of a notebook: its parameters, the values typed for them, the job's name, where the
executed notebook goes (kakehashi_lab.notebooks, pure functions)."""

from __future__ import annotations

import pytest
from kakehashi_lab.notebooks import ParameterError, executed_path, job_name_for, parameters_of, parse_parameters

from tests.hub.conftest import notebook

CELL = "# training knobs\nlr = 0.01\nepochs: int = 3\noptimizer = 'adam'\nlayers = [64, 32]\nx, y = 1, 2\nprint(lr)"


def test_the_parameters_are_the_top_level_assignments_of_the_tagged_cell_as_written():
    found = parameters_of(notebook(parameters=CELL))
    assert [(p.name, p.default, p.is_text) for p in found] == [
        ("lr", "0.01", False), ("epochs", "3", False), ("optimizer", "'adam'", True), ("layers", "[64, 32]", False)]


def test_a_notebook_without_a_parameters_cell_has_no_parameters():
    nb = notebook()
    nb["cells"][0]["metadata"] = {}
    assert parameters_of(nb) == []
    assert parameters_of(notebook(parameters="lr = (")) == []  # a cell that does not parse


def test_typed_values_become_python_values_and_unchanged_ones_are_left_out():
    nb = notebook(parameters=CELL)
    assert parse_parameters({"lr": "0.1", "epochs": "3", "optimizer": "sgd", "layers": "[128]"}, nb) == {
        "lr": 0.1, "optimizer": "sgd", "layers": [128]}
    assert parse_parameters({"optimizer": "'sgd'"}, nb) == {"optimizer": "sgd"}


@pytest.mark.parametrize(("typed", "message"), [
    ({"alpha": "1"}, "does not set 'alpha'"),
    ({"lr": "0.1 +"}, "is not a Python value"),
    ({"lr": "__import__('os')"}, "is not a Python value"),
    ({"layers": "{1, 2}"}, "cannot be passed to papermill"),
])
def test_values_that_are_not_plain_data_or_names_the_cell_does_not_set_are_refused(typed, message):
    with pytest.raises(ParameterError, match=message) as refused:
        parse_parameters(typed, notebook(parameters=CELL))
    assert refused.value.name == next(iter(typed))


@pytest.mark.parametrize(("path", "name"), [
    ("analysis.ipynb", "analysis"),
    ("work/Run 2 (final).ipynb", "Run-2-final"),
    ("2024-results.ipynb", "notebook-2024-results"),
    ("日本語.ipynb", "notebook"),
    (f"{'x' * 80}.ipynb", "x" * 63),
])
def test_the_job_is_named_after_the_notebook_in_characters_the_portal_accepts(path, name):
    assert job_name_for(path) == name


def test_the_executed_notebook_goes_next_to_the_original():
    assert executed_path("work/analysis.ipynb", 42) == "work/analysis.kakehashi-42.ipynb"
    assert executed_path("analysis.ipynb", 7) == "analysis.kakehashi-7.ipynb"
