"""ServiceSettings: §9 names, units, precedence, unknown keys, engine mapping."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.settings import ServiceSettings
from common.errors import InvalidSetting
from common.settings import parse_duration, parse_size
from common.units import GiB, KiB, MiB
from compaction import CompactionSettings
from journal import JournalSettings, SyncMode
from ledger import LedgerLimits, ReadCacheSettings, WriteCacheSettings
from node import DiskWatchSettings


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("64MiB", 64 * MiB),
        ("1GiB", GiB),
        ("512KiB", 512 * KiB),
        ("10MB", 10_000_000),
        ("4096", 4096),
        (" 2 mib ", 2 * MiB),
        ("1.5KiB", 1536),
        (7, 7),
    ],
)
def test_sizes(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize(
    ("text", "value"),
    [("10s", 10.0), ("5m", 300.0), ("1h", 3600.0), ("250ms", 0.25), ("30", 30.0), (2.5, 2.5)],
)
def test_durations(text, value):
    assert parse_duration(text) == value


def test_defaults_follow_the_design():
    s = ServiceSettings.load(environ={})
    assert s.data_dir == Path("./data")
    assert (s.host, s.port, s.admin_token) == ("127.0.0.1", 8080, None)
    assert s.journal_device_path == Path("./data/journal.dev")
    assert s.journal_capacity == GiB
    assert s.write_cache_size == 256 * MiB and s.read_cache_size == 128 * MiB
    assert s.flush_interval == 10 and s.entry_log_size_limit == GiB
    assert s.max_entry_size == 5 * MiB and s.gc_wait_time == 600
    assert (s.minor_compaction_threshold, s.minor_compaction_interval) == (0.2, 3600)
    assert (s.major_compaction_threshold, s.major_compaction_interval) == (0.8, 86400)
    assert s.s3_endpoint_url is None and s.s3_bucket is None
    assert (s.s3_prefix, s.s3_region, s.cluster) == ("ledgerd", "us-east-1", "default")
    assert s.bookie_id
    assert s.offload_chunk_size == 8 * MiB and s.offload_after_close is False
    assert s.offload_deletion_lag == 14400
    assert s.readonly_disk_usage_threshold == 0.95


def test_precedence_flags_over_env_over_file(tmp_path):
    config = tmp_path / "ledgerd.toml"
    config.write_text(
        'PORT = 1000\nhost = "127.0.0.2"\ndata_dir = "/srv/x"\nwrite_cache_size = "64MiB"\n'
    )
    env = {"LEDGERD_PORT": "2000", "LEDGERD_DATA_DIR": "/srv/y"}
    s = ServiceSettings.load(config, environ=env, port=3000)
    assert (s.port, s.host, s.data_dir, s.write_cache_size) == (
        3000,
        "127.0.0.2",
        Path("/srv/y"),
        64 * MiB,
    )
    s = ServiceSettings.load(config, environ=env, port=None)  # a flag not given
    assert s.port == 2000
    # LEDGERD_CONFIG names the file when --config is not given.
    s = ServiceSettings.load(environ={"LEDGERD_CONFIG": str(config)})
    assert s.port == 1000


def test_unknown_keys_are_rejected(tmp_path):
    config = tmp_path / "ledgerd.toml"
    config.write_text("jornal_capacity = 5\n")
    with pytest.raises(InvalidSetting, match="JORNAL_CAPACITY"):
        ServiceSettings.load(config, environ={})
    with pytest.raises(InvalidSetting, match="NOPE"):
        ServiceSettings.load(environ={}, nope=1)


def test_unreadable_or_invalid_file(tmp_path):
    with pytest.raises(InvalidSetting, match="cannot read"):
        ServiceSettings.load(tmp_path / "missing.toml", environ={})
    bad = tmp_path / "bad.toml"
    bad.write_text("port = = 1")
    with pytest.raises(InvalidSetting, match="not valid TOML"):
        ServiceSettings.load(bad, environ={})


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"LEDGERD_JOURNAL_CAPACITY": "lots"}, "JOURNAL_CAPACITY"),
        ({"LEDGERD_PORT": "70000"}, "PORT"),
        ({"LEDGERD_FLUSH_INTERVAL": "soon"}, "FLUSH_INTERVAL"),
        ({"LEDGERD_FLUSH_INTERVAL": "0"}, "FLUSH_INTERVAL"),
        ({"LEDGERD_MINOR_COMPACTION_THRESHOLD": "1.5"}, "MINOR_COMPACTION_THRESHOLD"),
        ({"LEDGERD_OFFLOAD_AFTER_CLOSE": "perhaps"}, "OFFLOAD_AFTER_CLOSE"),
        ({"LEDGERD_OFFLOAD_DELETION_LAG": "-1"}, "OFFLOAD_DELETION_LAG"),
        ({"LEDGERD_READONLY_DISK_USAGE_THRESHOLD": "0"}, "READONLY_DISK_USAGE_THRESHOLD"),
        # The X-Ledger-Password header is sized for 1024 bytes (app/deps.py).
        ({"LEDGERD_MAX_PASSWORD_SIZE": "1025"}, "MAX_PASSWORD_SIZE"),
        ({"LEDGERD_BENCH_ENDPOINTS": "2"}, "BENCH_ENDPOINTS"),
        ({"LEDGERD_JOURNAL_SYNC_MODE": "o_sync"}, "JOURNAL_SYNC_MODE"),
    ],
)
def test_invalid_values_name_the_setting(env, name):
    with pytest.raises(InvalidSetting, match=name):
        ServiceSettings.load(environ=env)


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"LEDGERD_JOURNAL_CAPACITY": "1000"}, "JOURNAL_CAPACITY"),
        ({"LEDGERD_JOURNAL_CAPACITY": "8MiB"}, "MAX_ENTRY_SIZE"),
        ({"LEDGERD_MINOR_COMPACTION_THRESHOLD": "0.9"}, "MINOR_COMPACTION_THRESHOLD"),
        ({"LEDGERD_ENTRY_LOG_SIZE_LIMIT": "1KiB"}, "ENTRY_LOG_SIZE_LIMIT"),
        ({"LEDGERD_S3_BUCKET": "bucket", "LEDGERD_OFFLOAD_CHUNK_SIZE": "1MiB"},
         "OFFLOAD_CHUNK_SIZE"),
        ({"LEDGERD_S3_BUCKET": "bucket", "LEDGERD_OFFLOAD_PART_SIZE": "1MiB"},
         "OFFLOAD_PART_SIZE"),
        ({"LEDGERD_S3_BUCKET": "bucket", "LEDGERD_OFFLOAD_PACK_SIZE": "1MiB"},
         "OFFLOAD_PACK_LEDGER_SIZE_MAX"),
        ({"LEDGERD_MAX_LEDGERS": "0"}, "MAX_LEDGERS"),
    ],
)
def test_component_checks_name_the_setting(env, name):
    with pytest.raises(InvalidSetting, match=name):
        ServiceSettings.load(environ=env).to_node()


def test_the_journal_sync_mode_reaches_the_journal():
    node = ServiceSettings.load(environ={"LEDGERD_JOURNAL_SYNC_MODE": "buffered_fdatasync"}
                                ).to_node()
    assert node.engine.journal.sync_mode is SyncMode.BUFFERED_FDATASYNC


def test_a_deletion_lag_of_zero_is_accepted():
    settings = ServiceSettings.load(environ={"LEDGERD_S3_BUCKET": "bucket",
                                             "LEDGERD_OFFLOAD_DELETION_LAG": "0"})
    offload = settings.to_node().offload
    assert offload is not None and offload.deletion_lag_s == 0.0


def test_defaults_are_the_components_own():
    node = ServiceSettings.load(environ={}).to_node()
    assert node.engine.journal == JournalSettings(device_path=Path("data/journal.dev"))
    assert node.engine.write_cache == WriteCacheSettings()
    assert node.engine.read_cache == ReadCacheSettings()
    assert node.engine.limits == LedgerLimits()
    assert node.compaction == CompactionSettings()
    assert node.disk == DiskWatchSettings()
    assert node.offload is None


def test_to_node_maps_every_setting(tmp_path):
    s = ServiceSettings.load(
        environ={
            "LEDGERD_DATA_DIR": str(tmp_path),
            "LEDGERD_JOURNAL_DEVICE": "/dev/loop9",
            "LEDGERD_JOURNAL_CAPACITY": "64MiB",
            "LEDGERD_WRITE_CACHE_SIZE": "32MiB",
            "LEDGERD_READ_CACHE_SIZE": "16MiB",
            "LEDGERD_FLUSH_INTERVAL": "2s",
            "LEDGERD_CHECKPOINT_SYNC_BYTES": "1MiB",
            "LEDGERD_ENTRY_LOG_SIZE_LIMIT": "128MiB",
            "LEDGERD_MAX_ENTRY_SIZE": "1MiB",
            "LEDGERD_GC_WAIT_TIME": "1m",
            "LEDGERD_MINOR_COMPACTION_THRESHOLD": "0.1",
            "LEDGERD_MINOR_COMPACTION_INTERVAL": "30m",
            "LEDGERD_MAJOR_COMPACTION_THRESHOLD": "0.5",
            "LEDGERD_MAJOR_COMPACTION_INTERVAL": "12h",
            "LEDGERD_MAX_BATCH_SIZE": "2MiB",
        }
    )
    node = s.to_node()
    e = node.engine
    assert e.data_dir == tmp_path
    assert e.journal.device_path == Path("/dev/loop9")
    assert e.journal.capacity_bytes == 64 * MiB
    assert e.write_cache.size_bytes == 32 * MiB and e.write_cache.flush_interval_s == 2.0
    assert e.write_cache.sync_every_bytes == MiB
    assert e.read_cache.size_bytes == 16 * MiB
    assert e.entry_log.size_bytes_limit == 128 * MiB
    assert e.entry_log.directory == tmp_path / "entrylogs"
    assert e.limits.entry_size_bytes_max == MiB and e.limits.batch_size_bytes_max == 2 * MiB
    c = node.compaction
    assert c is not None
    assert (c.gc_wait_time_s, c.minor_threshold, c.minor_interval_s) == (60.0, 0.1, 1800.0)
    assert (c.major_threshold, c.major_interval_s) == (0.5, 43200.0)


def test_small_journals_get_a_window_that_fits():
    s = ServiceSettings.load(
        environ={"LEDGERD_JOURNAL_CAPACITY": "4MiB", "LEDGERD_MAX_ENTRY_SIZE": "64KiB"}
    )
    e = s.to_node().engine
    assert e.journal.sliding_window_bytes_max == MiB
    assert e.limits.batch_size_bytes_max <= e.journal.sliding_window_bytes_max
