"""The option table (shell_kernel/options.py) and what config.py derives from it.

Pure logic: no kernel is started.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from shell_kernel.config import KernelConfig, add_options, config_from_args
from shell_kernel.options import OPTIONS, default
from shell_kernel.session import Options

#: A value other than the default for every option, one its parser accepts
#: unchanged (a new option needs one here: see test_every_option_has_a_sample).
SAMPLES = {
    "ssh": "deploy@web1.example.com:2222",
    "ssh_config": "SSH_CONFIG_FILE",  # replaced by a real file: the parser checks it exists
    "accept_new_host_key": True,
    "ephemeral": True,
    "clean": True,
    "no_completion": True,
    "session": "nightly-build.2",
    "take_over": True,
    "tty": True,
    "remote_idle_timeout": 60.5,
    "bash": "/opt/bash 5/bin/bash",
    "interrupt_grace": 2.5,
    "output_limit_mb": 0.25,
    "spill_dir": "spilled output",
    "start_timeout": 7.0,
}


@pytest.fixture
def samples(tmp_path) -> dict:
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text("Host *\n")
    return {**SAMPLES, "ssh_config": str(ssh_config)}


def parse(argv: list[str]) -> KernelConfig:
    parser = argparse.ArgumentParser()
    add_options(parser)
    return config_from_args(parser.parse_args(argv))


def test_every_option_has_a_sample():
    assert set(SAMPLES) == {option.name for option in OPTIONS}
    for option in OPTIONS:
        assert SAMPLES[option.name] != option.default, option.name


def test_config_fields_are_the_declared_options_with_their_defaults():
    config = KernelConfig()
    assert [field.name for field in dataclasses.fields(config)] == [o.name for o in OPTIONS]
    for option in OPTIONS:
        assert getattr(config, option.name) == option.default == default(option.name)


def test_defaults_are_left_out_of_argv():
    assert KernelConfig().to_argv() == []
    assert parse([]) == KernelConfig()


@pytest.mark.parametrize("option", OPTIONS, ids=lambda option: option.flag)
def test_each_option_round_trips_through_argv(option, samples):
    values = {option.name: samples[option.name]}
    if option.needs_ssh:
        values["ssh"] = samples["ssh"]
    config = KernelConfig(**values)
    argv = config.to_argv()
    written = [option.flag] if option.is_switch else [option.flag, str(samples[option.name])]
    assert argv[-len(written):] == written
    assert parse(argv) == config


def test_all_options_at_once_round_trip(samples):
    config = KernelConfig(**samples)
    assert parse(config.to_argv()) == config


@pytest.mark.parametrize("option", [o for o in OPTIONS if o.needs_ssh], ids=lambda o: o.flag)
def test_ssh_only_options_need_ssh(option, samples):
    argv = KernelConfig(**{option.name: samples[option.name]}).to_argv()
    with pytest.raises(ValueError,
                       match="--ssh-config, --accept-new-host-key and --ephemeral need --ssh HOST"):
        parse(argv)


def test_session_defaults_match_the_declared_ones():
    session_defaults, configured = Options(), KernelConfig().session_options()
    assert session_defaults.interrupt_grace == configured.interrupt_grace
    assert session_defaults.output_limit == configured.output_limit
    assert session_defaults.start_timeout == configured.start_timeout
    assert configured.spill_dir == Path(session_defaults.spill_dir).absolute()


NUMERIC = [o for o in OPTIONS if isinstance(o.default, float) or o.metavar in ("S", "MB")]


@pytest.mark.parametrize("option", NUMERIC, ids=lambda o: o.flag)
@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "Infinity", "1e999"])
def test_numbers_that_are_not_finite_are_refused(option, text, capsys):
    """nan compared false with 0 and passed `value <= 0`; it then failed
    later with a traceback (install --remote-idle-timeout nan)."""
    with pytest.raises(SystemExit) as exit_info:
        parse([option.flag, text])
    assert exit_info.value.code == 2
    assert f"{option.flag}: {text!r} is not a finite number" in capsys.readouterr().err


def test_every_number_option_is_checked():
    assert {o.name for o in NUMERIC} == {"remote_idle_timeout", "interrupt_grace",
                                        "output_limit_mb", "start_timeout"}


@pytest.mark.parametrize("flag", ["--output-limit-mb", "--timeout"])
@pytest.mark.parametrize("text", ["nan", "inf"])
def test_run_refuses_numbers_that_are_not_finite(flag, text, capsys):
    from shell_kernel.cli import main
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "nb.ipynb", "--hosts", "web1", flag, text])
    assert exit_info.value.code == 2
    assert f"{flag}: {text!r} is not a finite number" in capsys.readouterr().err
