"""docs/configuration.md is generated from the config models, and is current."""

from __future__ import annotations

import subprocess
import sys

from pydantic import BaseModel

from components.offline import config_reference as ref
from components.stack import config, model_base


def test_configuration_page_is_current():
    assert ref.OUT.read_text() == ref.markdown(), f"docs/configuration.md is stale: run {ref.COMMAND}"


def _keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    out = set()
    for name, field in model.model_fields.items():
        key = prefix + (field.alias or name)
        out.add(key)
        for sub in ref.models_in(field.annotation):
            out |= _keys(sub, key + ".")
    return out


def test_every_key_of_every_section_is_documented_with_type_default_and_description():
    text = ref.OUT.read_text()
    for section in config.SECTIONS:
        field = next(f for n, f in config.StackConfig.model_fields.items() if (f.alias or n) == section)
        model = ref.models_in(field.annotation)[0]
        documented = {key for key, *_ in ref.rows(model)}
        assert documented == _keys(model), section
        assert f"## `rltrain:{section}`" in text
    rows = {key: (typ, default, desc) for key, typ, default, desc in ref.rows(config.WorkloadsConfig)}
    assert rows["image"][1] == "required"
    assert rows["retries"] == ("integer", "`3`",
                               "failures allowed (disruptions such as node drains, a node lost or repaired, never count)")
    assert rows["infrastructureRestarts"][:2] == ("integer", "`3`")
    assert rows["multiNode.form"][0] == "one of `indexed-job`, `statefulset`, `rayjob`"
    assert rows["failFastExitCodes"][:2] == ("list of integer", "`[2, 126, 127]`")
    assert all(desc for _, _, desc in rows.values())


def test_a_key_without_a_description_is_refused():
    class Undocumented(model_base._Model):
        documented: int = 1
        """has one"""
        bare: int = 2

    try:
        ref.rows(Undocumented)
    except ValueError as e:
        assert "Undocumented.bare: no description" in str(e)
    else:
        raise AssertionError("an undocumented key passed")


def test_check_mode_is_what_ci_can_run():
    res = subprocess.run([sys.executable, "-m", "components.offline.config_reference", "--check"],
                         cwd=ref.ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
