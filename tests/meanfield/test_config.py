"""Config validation: every rejection names the file, the field and the reason."""

import numpy as np
import pytest
from conftest import DATA

from meanfield import config, data
from meanfield.errors import ConfigError, DataError

BASE = """
[data]
kind = "gaussian"
n = 5
d = 2
[model]
n_particles = 10
[dynamics]
lam = 0.05
eta = 0.05
taus = [1e-2, 1e-3]
steps_per_tau = 10
"""


def _cfg(text, tmp_path, name="c.toml"):
    p = tmp_path / name
    p.write_text(text)
    return config.load(p)


def test_valid_config_fills_defaults(tmp_path):
    cfg = _cfg(BASE, tmp_path)
    assert cfg.dynamics.batch_size == 0
    assert cfg.output.observe_every == 100
    assert cfg.taus == [1e-2, 1e-3]
    assert cfg.hash() == config.loads(BASE, "other", tmp_path).hash()


@pytest.mark.parametrize("old,new,field,words", [
    ("lam = 0.05", "lam = 0.0", "dynamics.lam", "> 0"),
    ("lam = 0.05", "lam = -1", "dynamics.lam", "> 0"),
    ("eta = 0.05", "eta = 0", "dynamics.eta", "> 0"),
    ("taus = [1e-2, 1e-3]", "taus = [1e-2, -1e-3]", "dynamics.taus[1]", ">= 0"),
    ("taus = [1e-2, 1e-3]", "taus = []", "dynamics.taus", "non-empty"),
    ("n_particles = 10", "n_particles = 0", "model.n_particles", ">= 1"),
    ("n_particles = 10", "n_particles = 2.5", "model.n_particles", "integer"),
    ("n_particles = 10", 'n_particles = "ten"', "model.n_particles", "integer"),
    ("lam = 0.05", 'lam = "big"', "dynamics.lam", "number"),
    ("lam = 0.05", "lam = nan", "dynamics.lam", "finite"),
    ("lam = 0.05", "lamda = 0.05", "dynamics.lamda", "did you mean 'lam'"),
    ('kind = "gaussian"', 'kind = "gausian"', "data.kind", "did you mean 'gaussian'"),
    ("[model]", "[modle]", "modle", "did you mean 'model'"),
    # a key of another table is pointed to its table, not to a look-alike ('sharpness')
    ("n_particles = 10", "n_particles = 10\nchains = 2", "model.chains",
     "it belongs in [dynamics] (dynamics.chains)"),
    ("lam = 0.05", "lam = 0.05\nobserve_every = 5", "dynamics.observe_every",
     "it belongs in [output] (output.observe_every)"),
    ('kind = "gaussian"', 'kind = "gaussian"\nchains = 2', "data.chains",
     "it belongs in [dynamics] (dynamics.chains)"),
    ("steps_per_tau = 10", "steps_per_tau = 0", "dynamics.steps_per_tau", ">= 1"),
    ("eta = 0.05", "eta = 50.0", "dynamics.eta", "unstable"),
])
def test_rejections_name_file_field_reason(tmp_path, old, new, field, words):
    assert old in BASE
    with pytest.raises(ConfigError) as ei:
        _cfg(BASE.replace(old, new), tmp_path)
    line = ei.value.line()
    assert str(tmp_path / "c.toml") in line
    assert ei.value.field == field
    assert words in line
    assert "\n" not in line


def test_malformed_toml(tmp_path):
    with pytest.raises(ConfigError, match="malformed TOML"):
        _cfg(BASE + "\n[dynamics\n", tmp_path)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        config.load(tmp_path / "nope.toml")


def test_data_file_errors(tmp_path):
    (tmp_path / "empty.csv").write_text("# nothing\nx,y\n")
    (tmp_path / "nan.csv").write_text("1,2\nnan,3\n")
    (tmp_path / "ragged.csv").write_text("1,2,3\n4,5\n")
    with open(tmp_path / "obj.npy", "wb") as fh:    # NumPy's writer pickles object arrays
        np.lib.format.write_array(fh, np.array([{"a": 1}], dtype=object))
    np.savez(tmp_path / "mismatch.npz", X=np.zeros((3, 2)), y=np.zeros(4))
    cases = {"empty.csv": "empty", "nan.csv": "NaN", "ragged.csv": "columns",
             "obj.npy": "pickled", "mismatch.npz": "inconsistent dimensions",
             "missing.csv": "no such file"}
    for name, words in cases.items():
        text = BASE.replace('kind = "gaussian"\nn = 5\nd = 2', f'kind = "file"\npath = "{name}"')
        cfg = _cfg(text, tmp_path)
        with pytest.raises(DataError) as ei:
            data.from_config(cfg)
        assert name in ei.value.line() and words in ei.value.line(), ei.value.line()


def test_loaders_agree(tmp_path):
    ds = data.load_file(DATA / "plane8.csv", target="y")
    np.save(tmp_path / "p.npy", np.c_[ds.X, ds.y])
    np.savez(tmp_path / "p.npz", X=ds.X, y=ds.y)
    for f in ("p.npy", "p.npz"):
        other = data.load_file(tmp_path / f)
        np.testing.assert_array_equal(other.X, ds.X)
        np.testing.assert_array_equal(other.y, ds.y)


def test_embedded_default_is_plane8():
    cfg = config.embedded_default()
    ds = data.from_config(cfg)
    ref = data.load_file(DATA / "plane8.csv", target="y")
    np.testing.assert_array_equal(ds.X, ref.X)
    np.testing.assert_array_equal(ds.y, ref.y)
    shipped = config.load(DATA / "plane8.toml")
    assert shipped.model == cfg.model and shipped.dynamics == cfg.dynamics
    assert shipped.output == cfg.output


def test_shipped_configs_load():
    import glob
    paths = sorted(glob.glob(str(DATA / "*.toml")))
    assert len(paths) >= 6
    for p in paths:
        cfg = config.load(p)
        ds = data.from_config(cfg)
        assert ds.n >= 2


def test_two_point_generator():
    ds = data.two_point(d=3, norm=2.0, labels="odd", y=1.5)
    np.testing.assert_array_equal(ds.X, [[2, 0, 0], [-2, 0, 0]])
    np.testing.assert_array_equal(ds.y, [1.5, -1.5])


def test_generated_data_size_is_bounded(tmp_path):
    text = BASE.replace('kind = "gaussian"\nn = 5\nd = 2',
                        'kind = "grid"\nd = 3\npoints_per_axis = 100000')
    with pytest.raises(ConfigError) as ei:
        _cfg(text, tmp_path)
    assert ei.value.field == "data.points_per_axis"


def test_csv_header_must_be_all_text_and_complex_refused(tmp_path):
    (tmp_path / "typo.csv").write_text("1,a,3\n4,5,6\n")
    with pytest.raises(DataError, match="line 1"):
        data.load_file(tmp_path / "typo.csv")
    (tmp_path / "head.csv").write_text("x1,x2,y\n4,5,6\n")
    assert data.load_file(tmp_path / "head.csv", target="y").n == 1
    np.save(tmp_path / "c.npy", np.ones((3, 3), dtype=complex))
    with pytest.raises(DataError, match="complex"):
        data.load_file(tmp_path / "c.npy")


def test_inline_errors_name_the_config_field(tmp_path):
    text = BASE.replace('kind = "gaussian"\nn = 5\nd = 2',
                        'kind = "inline"\nX = [[1.0], [2.0]]\ny = [1.0]')
    with pytest.raises(DataError) as ei:
        data.from_config(_cfg(text, tmp_path))
    assert ei.value.field == "data.y"


# ---------------------------------------------------------------- CSV columns chosen by name

def _headed(tmp_path, header, rows, data_extra=""):
    (tmp_path / "d.csv").write_text(header + "\n" + "\n".join(rows) + "\n")
    (tmp_path / "c.toml").write_text(f'[data]\nkind = "file"\npath = "d.csv"\n{data_extra}')
    return config.load(tmp_path / "c.toml")


def test_csv_target_and_features_by_name(tmp_path):
    rows = ["7,1.0,2.0,0.5", "8,3.0,4.0,-0.5", "9,5.0,6.5,1.5"]
    cfg = _headed(tmp_path, "id,x1,x2,label", rows,
                  'target = "label"\nfeatures = ["x2", "x1"]\n')
    ds = data.from_config(cfg)
    np.testing.assert_array_equal(ds.X, [[2.0, 1.0], [4.0, 3.0], [6.5, 5.0]])
    np.testing.assert_array_equal(ds.y, [0.5, -0.5, 1.5])
    # the target alone: the inputs are every other column, in file order
    cfg = _headed(tmp_path, "label,x1,x2", ["1,2,3", "4,5,6"], 'target = "label"\n')
    ds = data.from_config(cfg)
    np.testing.assert_array_equal(ds.X, [[2, 3], [5, 6]])
    np.testing.assert_array_equal(ds.y, [1, 4])
    # the names enter the config's hash; a config without them keeps its old hash
    assert cfg.as_dict()["data"]["target"] == "label" and "features" not in cfg.as_dict()["data"]
    plain = config.from_dict({"data": {"kind": "file", "path": str(tmp_path / "d.csv")}})
    assert "target" not in plain.as_dict()["data"] and '"target":"label"' in cfg.canonical_json()


@pytest.mark.parametrize("header,extra,field,words", [
    # a header present but not used by name: refused, naming the choices
    ("label,x1,x2", "", "header", "data.target = NAME, one of: label, x1, x2"),
    ("id,x1,x2,y", "", "header", "one of: id, x1, x2, y"),
    ("x1,x2,y", 'target = "z"\n', "data.target", "no column 'z'; columns: x1, x2, y"),
    ("x1,x2,y", 'target = "y"\nfeatures = ["x1", "x3"]\n', "data.features", "no column 'x3'"),
    ("x1,x2,y", 'target = "y"\nfeatures = ["x1", "y"]\n', "data.features", "holds the target"),
    ("x1,x1,y", 'target = "y"\n', "header", "repeated column name(s) x1"),
    (None, 'target = "y"\n', "data.target", "no header line"),
])
def test_csv_names_refused_with_one_line(tmp_path, header, extra, field, words):
    width = 3 if header is None else len(header.split(","))
    rows = [",".join(str(i + k) for k in range(width)) for i in (1, 4)]
    if header is None:
        (tmp_path / "d.csv").write_text("\n".join(rows) + "\n")
        (tmp_path / "c.toml").write_text(f'[data]\nkind = "file"\npath = "d.csv"\n{extra}')
        cfg = config.load(tmp_path / "c.toml")
    else:
        cfg = _headed(tmp_path, header, rows, extra)
    with pytest.raises(DataError) as ei:
        data.from_config(cfg)
    line = ei.value.line()
    assert "d.csv" in line and ei.value.field == field and words in line, line
    assert "\n" not in line


def test_csv_names_checked_in_the_config(tmp_path):
    np.save(tmp_path / "a.npy", np.ones((3, 3)))
    for extra, field in (('target = "y"\n', "data.target"), ("target = 3\n", "data.target"),
                         ("features = []\n", "data.features"),
                         ('features = "x1"\n', "data.features")):
        path = "a.npy" if extra == 'target = "y"\n' else "d.csv"
        (tmp_path / "c.toml").write_text(f'[data]\nkind = "file"\npath = "{path}"\n{extra}')
        with pytest.raises(ConfigError) as ei:
            config.load(tmp_path / "c.toml")
        assert ei.value.field == field, ei.value.line()


def test_missing_data_file_names_the_config_field(tmp_path):
    (tmp_path / "c.toml").write_text('[data]\nkind = "file"\npath = "nope.csv"\n')
    with pytest.raises(DataError) as ei:
        data.from_config(config.load(tmp_path / "c.toml"))
    assert ei.value.field == "data.path" and "c.toml" in ei.value.line()
    assert "nope.csv" in ei.value.line()


def test_data_values_beyond_the_float_bound_are_refused_in_one_line(tmp_path):
    """A value of 1e300 in a CSV is bad input (exit 2 naming the file, column and line), not a
    divergence of the dynamics; the bound is the config's."""
    from meanfield.schema import MAX_FLOAT
    from solvers.inputs import MAX_ABS
    assert MAX_ABS == MAX_FLOAT
    for text, field, where in (("x1,x2,y\n0,1,2\n1e300,0,3\n", "X", "line 3"),
                               ("x1,x2,y\n0,1,2\n1,0,-2e200\n", "y", "line 3")):
        p = tmp_path / "big.csv"
        p.write_text(text)
        with pytest.raises(DataError) as ei:
            data.load_file(p, target="y")
        line = ei.value.line()
        assert f"big.csv: {field}:" in line and where in line and "rescale" in line, line
    ok = tmp_path / "ok.csv"
    ok.write_text("x1,y\n1e15,-1e15\n0,1\n")           # the bound itself is accepted
    assert data.load_file(ok, target="y").X[0, 0] == 1e15


@pytest.mark.parametrize("taus,init,warned", [
    ([1e-4, 1e-3, 1e-2], "random", True),        # cold to hot from random particles
    ([1e-3, 1e-3, 1e-2], "random", True),
    ([1e-4, 1e-3, 1e-2], "convex", False),       # what cold to hot is meant for
    ([1e-2, 1e-3, 1e-4], "random", False),       # hot to cold
    ([1e-2, 1e-3, 1e-2], "random", False),       # a reheating study
    ([1e-3, 1e-3], "random", False),
    ([1e-3], "random", False),
])
def test_a_ladder_running_cold_to_hot_is_warned_about(taus, init, warned):
    from conftest import config_dict
    cfg = config.from_dict(config_dict({"dynamics.taus": taus, "model.init": init}))
    msg = config.ladder_order_warning(cfg)
    assert (msg is not None) == warned
    if warned:
        assert "\n" not in msg
        assert "runs cold to hot" in msg and "hot to cold" in msg and "docs/cli.md" in msg
        assert f"{taus[0]:g} -> {taus[-1]:g}" in msg


def test_the_run_says_the_ladder_runs_cold_to_hot(tmp_path):
    from conftest import tiny_toml

    from meanfield import runner
    lines = []
    for name, taus in (("up", [1e-3, 1e-2]), ("down", [1e-2, 1e-3])):
        cfg = config.loads(tiny_toml({"dynamics.taus": taus, "dynamics.steps_per_tau": 40}))
        before = len(lines)
        runner.run(cfg, tmp_path / f"{name}.h5", progress=False, threads=1, log=lines.append)
        warned = [ln for ln in lines[before:] if "cold to hot" in ln]
        assert len(warned) == (1 if name == "up" else 0), lines
    assert warned == [] and lines[0].startswith("warning: dynamics.taus runs cold to hot")


@pytest.mark.parametrize("tau", [2.2e-308, 5e-324, 1e-200, 9.9e-31])
def test_a_temperature_below_the_floor_is_refused_in_one_line(tmp_path, capsys, tau):
    """A denormal temperature used to make the radial move divide by zero (``"mala"``) and the
    Gibbs reference run for minutes; it is refused at the config, naming the entry."""
    from meanfield.cli import main
    from meanfield.schema import MIN_TAU
    for integrator in ("em", "mala"):
        text = BASE.replace("taus = [1e-2, 1e-3]",
                            f"taus = [1e-2, {tau!r}]\nintegrator = \"{integrator}\"")
        with pytest.raises(ConfigError) as ei:
            _cfg(text, tmp_path)
        assert ei.value.field == "dynamics.taus[1]"
        assert f"must be 0 or at least {MIN_TAU:g}" in ei.value.line()
        (tmp_path / "low.toml").write_text(text)
        assert main(["run", str(tmp_path / "low.toml"), "-o", str(tmp_path / "r.h5")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"meanfield: error: {ei.value.line()}".replace("c.toml", "low.toml")]
        assert not list(tmp_path.glob("r.h5*"))


def test_the_floor_and_zero_are_accepted(tmp_path):
    from meanfield.schema import MIN_TAU
    cfg = _cfg(BASE.replace("taus = [1e-2, 1e-3]", f"taus = [1e-2, {MIN_TAU!r}, 0.0]"), tmp_path)
    assert cfg.taus == [1e-2, MIN_TAU, 0.0]


def test_fine_steps_keep_older_configs_hash():
    """``dynamics.fine = 0`` (the default) is left out of the canonical config, so a config
    written before the key keeps its hash and run-file name; any other share enters it."""
    text = (DATA / "plane8.toml").read_text().replace("fine = 0.5\n", "")
    c0, c1, c2 = (config.loads(t, "plane8.toml", DATA) for t in (
        text, text.replace("[dynamics]", "[dynamics]\nfine = 0.0"),
        text.replace("[dynamics]", "[dynamics]\nfine = 0.5")))
    assert c0.dynamics.fine == c1.dynamics.fine == 0.0 and c2.dynamics.fine == 0.5
    assert c0.hash() == c1.hash() != c2.hash()
    assert "fine" not in c0.canonical_json() and '"fine":0.5' in c2.canonical_json()


def test_exchange_moves_keep_older_configs_hash():
    """``dynamics.exchange = 0`` (the default) is left out of the canonical config, as
    ``fine``: a config written before the key keeps its hash; any other probability enters it,
    and the runner's stepper gets it."""
    from meanfield import data as _data
    from meanfield.runner.loop import make_stepper
    text = (DATA / "plane8.toml").read_text()
    c0, c1, c2 = (config.loads(t, "plane8.toml", DATA) for t in (
        text, text.replace("[dynamics]", "[dynamics]\nexchange = 0.0"),
        text.replace("[dynamics]", "[dynamics]\nexchange = 1.0")))
    assert c0.dynamics.exchange == c1.dynamics.exchange == 0.0 and c2.dynamics.exchange == 1.0
    assert c0.hash() == c1.hash() != c2.hash()
    assert "exchange" not in c0.canonical_json() and '"exchange":1.0' in c2.canonical_json()
    ds = _data.from_config(c2)
    assert make_stepper(c2, ds).exchange == 1.0 and make_stepper(c0, ds).exchange == 0.0
