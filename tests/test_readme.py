"""The documentation says what the code says: the tables of algorithms, of optimizerConfig and of
every algorithm's hyperparameters (docs/reference/algorithms.md), of the model section
(docs/guides/train.md), and every `kuberl` command that the README and the docs show."""

import re
from pathlib import Path

from pydantic.alias_generators import to_camel

from kuberl_cli.explain import HYPERPARAMETERS
from kuberl_contract.config import ALGORITHMS, ModelConfig, OptimizerConfig, optimizers_using
from kuberl_contract.hyperparameters.fields import field_docs

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
ALGORITHMS_PAGE = DOCS / "reference" / "algorithms.md"
TRAIN_PAGE = DOCS / "guides" / "train.md"


def table(page: Path, header: str, section: str = "") -> list[list[str]]:
    """The rows of the first table of `page` whose header row starts with `header` (after the
    line `section`, when given)."""
    lines = page.read_text().splitlines()
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

    assert table(ALGORITHMS_PAGE, "| algorithm | default optimizer |") == expected


def test_the_optimizer_config_table_matches_the_settings():
    expected = [
        [
            to_camel(name),
            "null" if field.default is None else f"{field.default:g}",
            ", ".join(sorted(optimizer.value for optimizer in optimizers_using(name))),
        ]
        for name, field in OptimizerConfig.model_fields.items()
    ]

    assert [
        row[:3] for row in table(ALGORITHMS_PAGE, "| field | default | optimizers |")
    ] == expected


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

    assert [row[:2] for row in table(TRAIN_PAGE, "| field | default |", "## Models")] == expected


def test_every_algorithm_has_a_table_of_its_hyperparameters_and_their_defaults():
    for algorithm, model in HYPERPARAMETERS.items():
        expected = [[doc.name, doc.default, doc.summary] for doc in field_docs(model)]

        rows = table(ALGORITHMS_PAGE, "| hyperparameter | default |", f"### {algorithm}")
        assert rows == expected, algorithm


def documented_commands(text: str) -> dict[str, set[str]]:
    """{command: its long options} of every `kuberl ...` that `text` shows, in code spans and in
    shell blocks (`kuberl --version` counts as the option of the program itself, "")."""
    lines = re.findall(r"`(kuberl [^`\n]+)`", text) + [
        line.strip()
        for block in re.findall(r"```(?:sh|bash|console)\n(.*?)```", text, re.DOTALL)
        for line in block.splitlines()
    ]
    return commands_of(lines)


def commands_of(lines: list[str]) -> dict[str, set[str]]:
    """{command: its long options} of the `kuberl ...` commands in `lines`."""
    commands: dict[str, set[str]] = {}
    for line in lines:
        for part in line.split(";"):
            words = part.split("#")[0].split()
            if len(words) < 2 or words[0] != "kuberl":
                continue
            command = "" if words[1].startswith("-") else words[1]
            options = {
                w.strip("[]").split("=")[0] for w in words[1:] if w.strip("[").startswith("--")
            }
            commands.setdefault(command, set()).update(options)
    return commands


def test_every_command_and_option_the_readme_shows_exists():
    commands = documented_commands(README.read_text())
    assert {"train", "evaluate", "export", "serve", "submit", "get", "logs"} <= commands.keys()
    assert_commands_exist(commands)


def test_every_command_and_option_the_docs_show_exists():
    pages = sorted(DOCS.rglob("*.md"))
    commands = documented_commands("\n".join(page.read_text() for page in pages))
    assert {"train", "validate", "evaluate", "export", "get", "logs"} <= commands.keys()
    assert_commands_exist(commands)


def test_make_run_prints_next_commands_that_exist_as_they_can_be_typed():
    echoed = re.findall(r'@echo "\s*\$\(BIN\)/(kuberl [^"]*)"', (ROOT / "Makefile").read_text())
    commands = commands_of(echoed)
    assert {"evaluate", "export", "serve"} <= commands.keys()
    assert_commands_exist(commands)


def assert_commands_exist(commands: dict[str, set[str]]) -> None:
    from typer.testing import CliRunner

    from kuberl_cli.main import app

    for command, options in commands.items():
        result = CliRunner().invoke(app, [command, "--help"] if command else ["--help"])
        assert result.exit_code == 0, f"kuberl {command}: {result.output}"
        missing = {option for option in options if option not in result.output}
        assert not missing, f"kuberl {command} has no {', '.join(sorted(missing))}"
