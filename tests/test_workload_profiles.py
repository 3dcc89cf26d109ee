import pytest

from emu.cli import main
from emu.errors import ConfigError
from emu.workload import profiles
from emu.workload.profiles import apply_overrides
from emu.workload.costs import Model


def test_packaged_profiles_load_with_canonical_units():
    assert profiles.available("model") == ["llama-3-8b", "qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b"]
    assert {"kr260", "kr260-10g", "a100-ib"} <= set(profiles.available("hw"))
    for name in profiles.available("model"):
        m = profiles.load("model", name)
        assert m["weight_dtype"] == m["kv_dtype"] == "int4"
    for name in profiles.available("hw"):
        hw = profiles.load("hw", name)
        assert all(isinstance(hw[k], int) for k in ("compute_flops", "mem_bw", "link_rate", "op_overhead_ps", "mtu"))
        assert hw["kv_budget"] == "2x"  # binds by default (docs/workloads.md)


def test_kr260_is_the_board_the_issue_describes():
    hw = profiles.load("hw", "kr260")
    assert hw["mem_bw"] == 19_200_000_000 and hw["dram_bytes"] == 4 * 2**30
    assert hw["link_rate"] == 10**9 and hw["ports"] == 4 and hw["mtu"] == 1500
    assert hw["compute_flops"] == 1024 * 2 * 200_000_000 * 8 // 10  # 32x32 MACs at 200 MHz, 80 %
    assert profiles.load("hw", "kr260-10g")["link_rate"] == 10 * 10**9


def test_qwen_kv_footprint_matches_schemes_md():
    m = Model.from_profile(profiles.load("model", "qwen2.5-1.5b"))
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.intermediate, m.vocab) == (28, 1536, 12, 2, 128, 8960, 151936)
    assert m.m == 256 and m.m_token == 256 * 28  # 2 * H_kv * d * 0.5 B, eq. 1


def test_overrides_apply_to_their_section():
    model, hw = profiles.load_pair("qwen2.5-1.5b", "kr260", ["hw.link_rate=10Gbps", "model.layers=4", "hw.kv_budget=32MiB"])
    assert hw["link_rate"] == 10**10 and model["layers"] == 4 and hw["kv_budget"] == 32 * 2**20


@pytest.mark.parametrize("overrides,needle", [
    (["hw.link_rat=1Gbps"], "hw.link_rat"),
    (["model.heads=5"], "multiple of model.kv_heads"),
    (["hw.mtu=32"], "hw.mtu"),
    (["model.layers=0"], "model.layers must be positive"),
    (["hw.gamma=-1"], "hw.gamma"),
    (["hw.flow_control=lossless"], "hw.flow_control: 'lossless' is not one of ideal, drop, pause, credit"),
    (["hw.port_buffer=1513B"], r"hw.port_buffer = 1513B is outside 1514B\.\.1TiB"),
    (["hw.mtu=9000", "hw.port_buffer=8KiB"], r"hw.port_buffer = 8192B is outside 9014B"),
    (["hw.port_buffer=lots"], "hw.port_buffer: cannot read 'lots'"),
])
def test_bad_overrides(overrides, needle):
    with pytest.raises(ConfigError, match=needle):
        profiles.load_pair("qwen2.5-1.5b", "kr260", overrides)


def test_port_buffer_and_flow_control_are_optional_with_documented_defaults():
    """A profile without them gets 128 KiB and pause (docs/engine.md); --set changes both, a
    buffer of exactly one largest frame is accepted."""
    assert "port_buffer" not in profiles.load("hw", "kr260")
    assert profiles.DEFAULTS["hw"]["port_buffer"] == 128 * 1024 and profiles.DEFAULTS["hw"]["flow_control"] == "pause"
    hw = profiles.load("hw", "kr260", ["hw.flow_control=drop", "hw.port_buffer=1514B"])
    assert hw["flow_control"] == "drop" and hw["port_buffer"] == 1514


def test_the_timer_floor_a_profile_leaves_out_follows_its_flow_control():
    """Lossless fabrics get RoCE's conservative 4.096 us x 2^11, drop-tail IRN's fast 100 us
    (docs/nic.md, "Adaptive timeout"); a floor the profile or --set gives is kept as given."""
    kr = profiles.load("hw", "kr260")
    assert "rto_min_ps" not in kr
    for mode in ("ideal", "pause", "credit"):
        assert profiles.hw_defaults({**kr, "flow_control": mode})["rto_min_ps"] == 8_388_608_000
    assert profiles.hw_defaults({**kr, "flow_control": "drop"})["rto_min_ps"] == 100_000_000
    assert profiles.hw_defaults(kr)["rto_min_ps"] == 8_388_608_000  # pause, the default
    given = profiles.load("hw", "kr260", ["hw.flow_control=drop", "hw.rto_min_ps=3ms"])
    assert profiles.hw_defaults(given)["rto_min_ps"] == 3_000_000_000


def test_profile_files(tmp_path):
    good = tmp_path / "board.toml"
    good.write_text((profiles.resources.files("emu.workload.hardware") / "kr260.toml").read_text()
                    .replace('link_rate = "1Gbps"', 'link_rate = "25Gbps"'))
    assert profiles.load("hw", str(good))["link_rate"] == 25 * 10**9
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nlayers = 2\n')
    with pytest.raises(ConfigError, match=r"bad.toml: missing field 'hidden'"):
        profiles.load("model", str(bad))
    bad.write_text("layers = [")
    with pytest.raises(ConfigError, match="not valid TOML"):
        profiles.load("model", str(bad))
    js = tmp_path / "m.json"
    js.write_text('{"name": "m", "colour": "red"}')
    with pytest.raises(ConfigError, match="unknown field 'colour'"):
        profiles.load("model", str(js))
    with pytest.raises(ConfigError, match="available: "):
        profiles.load("hw", "kr999")


def test_profiles_command(capsys):
    assert main(["profiles", "list"]) == 0
    assert "qwen2.5-1.5b" in capsys.readouterr().out
    assert main(["profiles", "show", "kr260", "--set", "hw.link_rate=10Gbps"]) == 0
    out = capsys.readouterr().out
    assert "hw.link_rate = 10Gbps" in out and "hw.mem_bw = 19.2GB/s" in out
    assert main(["profiles", "show", "nope"]) == 2


def test_apply_overrides_parses_with_the_field_unit_and_copies():
    prof = {"hw": {"link_rate": 10**9, "link_latency_ps": 1}, "model": {"layers": 28}}
    out = apply_overrides(prof, ["hw.link_rate=10Gbps", "model.layers=4", "hw.link_latency_ps=2us"])
    assert out["hw"]["link_rate"] == 10 * 10**9
    assert out["model"]["layers"] == 4
    assert out["hw"]["link_latency_ps"] == 2 * 10**6
    assert prof["hw"]["link_rate"] == 10**9  # the input is not modified


@pytest.mark.parametrize("item,named", [
    ("hw.nope=1", "hw.nope"), ("cpu.x=1", "cpu.x"), ("hw.link_rate", "hw.link_rate"), ("hw.link_rate=fast", "hw.link_rate"),
    ("model.layers=2.5", "model.layers"), ("model.kv_dtype=int3", "model.kv_dtype"),
])
def test_apply_overrides_errors_name_the_key(item, named):
    with pytest.raises(ConfigError) as exc:
        apply_overrides({"hw": {}, "model": {}}, [item])
    assert named in str(exc.value)
