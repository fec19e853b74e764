"""The YAML config: durations, defaults, keys read, and bad files refused with a key path."""

from __future__ import annotations

from pathlib import Path

import pytest

from herdbook.config import (
    Config,
    ConfigError,
    grace_period,
    heartbeat_timeout,
    load_config,
    parse_config,
)
from herdbook.durations import Duration, parse_duration


@pytest.mark.parametrize(("written", "seconds"), [
    ("500ms", 0.5),
    ("2s", 2.0),
    ("5m", 300.0),
    ("1h", 3600.0),
    ("1d", 86400.0),
    ("1.5s", 1.5),
    ("45", 45.0),        # a YAML int: seconds
    ("0.25", 0.25),      # a YAML float: seconds
    ("'90'", 90.0),      # a quoted number without a unit: seconds
    ("' 3s '", 3.0),
])
def test_durations_are_read_in_seconds(written: str, seconds: float) -> None:
    config = parse_config(f"lifecycle: {{heartbeat_timeout: {written}}}".encode())
    assert config.lifecycle.heartbeat_timeout == pytest.approx(seconds)
    assert isinstance(config.lifecycle.heartbeat_timeout, Duration)


@pytest.mark.parametrize("bad", ["soon", "5 minutes", "-1s", "1w", "", -1, True])
def test_parse_duration_refuses_nonsense(bad: str | int) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(bad)


def test_defaults_without_a_file() -> None:
    for config in (parse_config(b""), load_config(None), Config()):
        assert config.lifecycle.heartbeat_timeout == 30.0
        assert config.lifecycle.heartbeat_timeout_sensitive == 120.0
        assert config.lifecycle.grace_period.standard == 60.0
        assert config.lifecycle.grace_period.sensitive == 300.0
        assert config.lifecycle.grace_period.borrowed == 30.0
        assert config.approval.auto_approve is False
        assert config.nats.url is None
        assert config.data_dir == "./.herd"


def test_grace_period_and_timeout_follow_the_node_class() -> None:
    config = parse_config(b"lifecycle: {grace_period: {borrowed: 10s}}")
    assert grace_period(config, "standard") == 60.0
    assert grace_period(config, "sensitive") == 300.0
    assert grace_period(config, "borrowed") == 10.0
    assert grace_period(config, "no-such-class") == 60.0
    assert heartbeat_timeout(config, "standard") == 30.0
    assert heartbeat_timeout(config, "borrowed") == 30.0
    assert heartbeat_timeout(config, "sensitive") == 120.0


def test_keys_are_read() -> None:
    config = parse_config(
        b"nats:\n"
        b"  url: nats://10.0.0.5:4222\n"
        b"data_dir: /var/lib/herd\n"
        b"approval:\n"
        b"  auto_approve: true\n"
        b"lifecycle:\n"
        b"  heartbeat_timeout: 45s\n"
        b"  grace_period: {standard: 2m}\n"
    )
    assert config.nats.url == "nats://10.0.0.5:4222"
    assert config.data_dir == "/var/lib/herd"
    assert config.approval.auto_approve is True
    assert config.lifecycle.heartbeat_timeout == 45.0
    assert config.lifecycle.grace_period.standard == 120.0
    assert config.lifecycle.grace_period.sensitive == 300.0  # untouched default


def test_load_config_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "herd.yaml"
    path.write_text("approval: {auto_approve: true}\n")
    assert load_config(path).approval.auto_approve is True


@pytest.mark.parametrize(("raw", "where", "why"), [
    (b"lifecycle: {heartbeat_timeout: soon}", "lifecycle.heartbeat_timeout: ",
     "invalid duration 'soon'"),
    (b"lifecycle: {heartbeat_timeout: -5}", "lifecycle.heartbeat_timeout: ", "negative"),
    (b"lifecycle: {grace_period: {sensitive: 5 weeks}}", "lifecycle.grace_period.sensitive: ",
     "invalid duration"),
    (b"approval: {auto_approve: maybe}", "approval.auto_approve: ", "Expected `bool`"),
    (b"approval: {auto_approve: 3}", "approval.auto_approve: ", "Expected `bool`, got `int`"),
    (b"nats: {port: http}", "nats.port: ", "Expected `int`"),
    (b"lifecycle: {hearbeat_timeout: 30s}", "lifecycle: ", "unknown field `hearbeat_timeout`"),
    # The rules are the Structs' types (Literal, Meta constraints, __post_init__): each
    # one below was a hand-written check in parse_config; the message stayed, or says
    # more (nats.replicas named its values "1, 3 or 5"; now as every word list does).
    (b"nats: {replicas: 2}", "nats.replicas: ", "2 is not one of 1, 3, 5"),
    (b"projector: {batch_size: 0}", "projector.batch_size: ", "must be between 1 and 10000"),
    (b"projector: {batch_size: 10001}", "projector.batch_size: ", "must be between 1 and 10000"),
    (b"pools: {gpu: {class: gold}}", "pools.gpu.class: ",
     "'gold' is not one of standard, sensitive, borrowed"),
    (b"pools: {a: {}, gpu: {provider: aws}}", "pools.gpu.provider: ",
     "'aws' is not one of local, fake"),
    (b"pools: {gpu: {min_nodes: 3, max_nodes: 2}}", "pools.gpu: ",
     "need 0 <= min_nodes <= max_nodes"),
    (b"pools: {gpu: {min_nodes: -1}}", "pools.gpu.min_nodes: ", "need 0 <= min_nodes"),
    (b"pools: {'a b': {}}", "pools.a b: ", "a pool name is 1-128 of A-Z a-z 0-9 _ -"),
    (b"pools: {\"gpu\\n\": {}}", "pools.gpu\n: ", "a pool name is"),
    (b"notifier: {type: email}", "notifier.type: ", "'email' is not one of none, webhook"),
    (b"scheduler: {delivery_limit: 0}", "scheduler.delivery_limit: ", "between 1 and 100"),
    (b"scheduler: {max_plan_attempts: 101}", "scheduler.max_plan_attempts: ",
     "between 1 and 100"),
    (b"allocations: {checkpoint_signal: SIGFOO}", "allocations.checkpoint_signal: ",
     "'SIGFOO' is not one of SIGUSR1, "),
    (b"view: {snapshots_kept: 0}", "view.snapshots_kept: ", "must be at least 1"),
    (b"view: {snapshot_every_events: 0}", "view.snapshot_every_events: ", "at least 1"),
    (b"view: {snapshot_every: 0s}", "view.snapshot_every: ", "must be more than 0"),
    (b"breaker: {max_share: 1.5}", "breaker.max_share: ", "need 0 < max_share <= 1"),
    (b"breaker: {max_share: 0}", "breaker.max_share: ", "need 0 < max_share <= 1"),
    (b"breaker: {min_nodes: -1}", "breaker.min_nodes: ", "must be at least 0"),
    (b"metrics: {port: 70000}", "metrics.port: ", "must be between 0 and 65535"),
    (b"http: {port: -1}", "http.port: ", "must be between 0 and 65535"),
    (b"validation: {name: 'a b'}", "validation.name: ", "1-128 of A-Z a-z 0-9 _ -"),
    (b"validation: {command: [x, '']}", "validation.command[1]: ", "an empty word"),
    (b"validation: {when: [boot]}", "validation.when[0]: ",
     "'boot' is not one of returned, approved"),
    (b"validation: {max_concurrent: 0%}", "validation.max_concurrent: ",
     'a share of the fleet such as "10%"'),
])
def test_bad_values_are_refused_with_key_path_and_reason(raw: bytes, where: str,
                                                         why: str) -> None:
    # given a file with one bad value, when parsed
    with pytest.raises(ConfigError) as excinfo:
        parse_config(raw, "herd.yaml")
    # then the message names the file, the key path and the reason, on one line
    message = str(excinfo.value)
    assert message.startswith(f"herd.yaml: {where}"), message
    assert why in message
    assert "\n" not in message.removeprefix(f"herd.yaml: {where}"), message


def test_unknown_top_level_key_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="unknown field `nat`"):
        parse_config(b"nat: {url: nats://x}", "herd.yaml")


def test_invalid_yaml_is_refused() -> None:
    with pytest.raises(ConfigError) as excinfo:
        parse_config(b"nats: [\n", "herd.yaml")
    assert str(excinfo.value).startswith("herd.yaml: not valid YAML: ")
    assert "\n" not in str(excinfo.value)


def test_a_list_at_the_top_is_refused() -> None:
    with pytest.raises(ConfigError, match="Expected `object`"):
        parse_config(b"- nats\n")


def test_a_missing_file_is_refused_with_its_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="nope.yaml"):
        load_config(missing)


def test_a_file_of_only_comments_gives_the_defaults() -> None:
    assert parse_config(b"# lifecycle:\n#   heartbeat_timeout: 30s\n") == Config()


def test_a_nan_duration_is_refused() -> None:
    with pytest.raises(ConfigError, match="lifecycle.heartbeat_timeout"):
        parse_config(b"lifecycle: {heartbeat_timeout: .nan}")


def test_the_readme_config_reference_is_a_valid_config() -> None:
    from pathlib import Path
    readme = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    section = readme[readme.index("# Configuration"):]
    block = section[section.index("```yaml") + len("```yaml"):]
    block = block[:block.index("```")]
    config = parse_config(block, "README")
    import msgspec.yaml

    from herdbook.config import Config
    documented = set(msgspec.yaml.decode(block))
    assert set(Config.__struct_fields__) - {"data_dir", "node_id"} <= documented
    assert config.scheduler.delivery_limit == 3 and config.allocations.checkpoint_signal == "SIGUSR1"
    assert config.pools["training"].health.auto_replace
    assert config.notifier.type == "webhook"
