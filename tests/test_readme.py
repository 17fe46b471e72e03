"""The README's tables of algorithms, of optimizerConfig and of the model section say what the
code says."""

from pathlib import Path

from pydantic.alias_generators import to_camel

from kuberl_trainer.config import ALGORITHMS, ModelConfig, OptimizerConfig, optimizers_using

README = Path(__file__).parents[1] / "README.md"


def table(header: str, section: str = "") -> list[list[str]]:
    """The rows of the README's first table whose header row starts with `header` (after the
    line `section`, when given)."""
    lines = README.read_text().splitlines()
    after = lines.index(section) if section else 0
    start = next(i for i, line in enumerate(lines) if i > after and line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:  # after the header and its |---| line
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_the_algorithm_table_matches_the_algorithms():
    expected = [
        [
            name,
            row.optimizers[0].value,
            ", ".join(optimizer.value for optimizer in row.optimizers[1:]),
            "Discrete"
            if row.discrete_actions_only
            else "Box"
            if row.continuous_actions_only
            else "Box, Discrete",
        ]
        for name, row in ALGORITHMS.items()
    ]

    assert table("| algorithm | default optimizer |") == expected


def test_the_optimizer_config_table_matches_the_settings():
    expected = [
        [
            to_camel(name),
            "null" if field.default is None else f"{field.default:g}",
            ", ".join(sorted(optimizer.value for optimizer in optimizers_using(name))),
        ]
        for name, field in OptimizerConfig.model_fields.items()
    ]

    assert [row[:3] for row in table("| field | default | optimizers |")] == expected


def test_the_model_table_lists_the_model_sections_fields_and_defaults():
    def shown(value) -> str:
        if value is None:
            return "null"
        if isinstance(value, list):
            return "[" + ", ".join(shown(item) for item in value) + "]"
        return str(value)

    expected = [
        [to_camel(name), shown(getattr(ModelConfig(), name))] for name in ModelConfig.model_fields
    ]

    assert [row[:2] for row in table("| field | default |", "### Models")] == expected
