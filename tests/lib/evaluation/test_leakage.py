"""Leakage: one-feature rules learned on some rows and scored on others, the blessing's leakage checks, and their
settings."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import synthetic

from estimator_lib.config import BlessingConfig, BlessingError, ConfigError, JobConfig
from estimator_lib.data.prepare import PrepareResult
from estimator_lib.evaluation import Blessing, Truth, decide, evaluate_and_bless
from estimator_lib.evaluation.leakage import FeatureScore, one_feature_scores
from estimator_lib.evaluation.reference import Design, read_design
from estimator_lib.schema import CATEGORICAL, NUMERIC, FeatureSpec, LabelSpec, Schema

CLASSES = ("a", "b", "c")


def numeric(name: str) -> FeatureSpec:
    return FeatureSpec(name, "f_" + name, NUMERIC)


def categorical(name: str, vocabulary) -> FeatureSpec:
    return FeatureSpec(name, "f_" + name, CATEGORICAL, value_type="string", vocabulary=tuple(vocabulary))


def split(features, columns, labels, learned_rows: int, label: LabelSpec):
    """(schema, learned design, learned labels, truth of the held-out rows, held-out design) of a table whose
    `columns` are design columns (standardised numerics; categorical ids from 0) in `features`' order, the first
    `learned_rows` rows learned from. `labels` are class indices or values."""
    schema = Schema(tuple(features), label)
    numerics = [c for f, c in zip(features, columns) if f.kind == NUMERIC]
    ids = [c for f, c in zip(features, columns) if f.kind == CATEGORICAL]
    offsets = np.cumsum([0] + [f.num_buckets for f in schema.categorical])[:-1]
    n = len(labels)
    numeric_all = np.stack(numerics, axis=1).astype(np.float64) if numerics else np.zeros((n, 0))
    ids_all = (np.stack(ids, axis=1) + offsets).astype(np.int64) if ids else np.zeros((n, 0), np.int64)
    buckets = sum(f.num_buckets for f in schema.categorical)

    def rows(part):
        return Design(numeric_all[part], ids_all[part], buckets)

    learned, held_out = slice(0, learned_rows), slice(learned_rows, n)
    keys = tuple(f"k{i}" for i in range(n - learned_rows))
    if label.task == "classification":
        truth = Truth(keys, np.array([label.classes[i] for i in labels[held_out]], dtype=object), label.classes)
    else:
        truth = Truth(keys, np.asarray(labels[held_out], dtype=np.float64))
    return schema, rows(learned), labels[learned], truth, rows(held_out)


def scores_by_name(*table, features=None):
    return {s.feature: s for s in one_feature_scores(*table, features=features)}


# -- the one-feature rules -------------------------------------------------------------------------------------
def test_each_id_predicts_its_learned_rows_majority_and_an_unseen_id_the_trivial_class():
    """Learned: id 0 -> a, a; id 1 -> b, a (a tie: the first class); id 2 -> b; overall a (3 of 5). Held out:
    ids 0, 1, 2 and 3 (never learned) with labels a, b, b, b: predicted a, a, b, a, so accuracy 2/4; the trivial
    model scores 3/4 (class b), and the rule makes twice its errors: skill -1."""
    label = LabelSpec("y", "classification", classes=("a", "b"))
    ids = np.array([0, 0, 1, 1, 2, 0, 1, 2, 3])
    labels = np.array([0, 0, 1, 0, 1, 0, 1, 1, 1])
    (score,) = one_feature_scores(*split([categorical("c", ["0", "1", "2"])], [ids], labels, 5, label))
    assert score == FeatureScore("c", "accuracy", 0.5, 0.75)
    assert score.skill == -1.0
    assert score.to_dict() == {"accuracy": 0.5, "skill": -1.0}


def test_a_numeric_value_takes_the_nearest_learned_values_rule():
    """Learned 0 -> a, 1 -> a, 2 -> b, 3 -> b. Held out 0.4 (nearest 0: a), 2.6 (3: b), 1.5 (1 and 2 as near: the
    lower, 1: a), 9 (3: b), with labels a, b, a, b: all right."""
    label = LabelSpec("y", "classification", classes=("a", "b"))
    x = np.array([0, 1, 2, 3, 0.4, 2.6, 1.5, 9.0])
    labels = np.array([0, 0, 1, 1, 0, 1, 0, 1])
    (score,) = one_feature_scores(*split([numeric("x")], [x], labels, 4, label))
    assert (score.value, score.trivial, score.skill) == (1.0, 0.5, 1.0)


def classification_table(n: int = 1000, learned: int = 800, seed: int = 0):
    """Three classes; a copy of the label as a categorical and as a numeric code, a noisy one (the class index
    plus noise of standard deviation 0.5), pure noise, and two unique row ids: a number (rows in random order),
    and a categorical whose vocabulary is the learned rows' ids (an eval row's id is out of vocabulary, as
    `prepare` makes it)."""
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, 3, n)
    features = [
        categorical("copy", CLASSES),
        numeric("code"),
        numeric("noisy"),
        numeric("noise"),
        numeric("row_number"),
        categorical("row_id", [str(i) for i in range(learned)]),
    ]
    row_ids = np.where(np.arange(n) < learned, np.arange(n), learned)  # learned + 0: the one OOV bucket
    columns = [labels, labels - 1.0, labels + rng.normal(0, 0.5, n), rng.normal(size=n), rng.permutation(n), row_ids]
    return split(features, columns, labels, learned, LabelSpec("y", "classification", classes=CLASSES))


def test_a_copy_of_the_label_scores_one_and_other_features_do_not():
    scores = scores_by_name(*classification_table())
    assert list(scores) == ["copy", "code", "noisy", "noise", "row_number", "row_id"]  # schema order
    assert scores["copy"].value == scores["code"].value == 1.0
    assert scores["copy"].skill == scores["code"].skill == 1.0
    # It predicts the label, far from alone (the best rule on it is right 4 times in 5; one nearest learned
    # value, whose class is itself noisy, less often).
    assert 0.3 < scores["noisy"].skill < 0.8
    assert scores["noise"].skill < 0.1


def test_a_unique_row_id_is_not_a_leak_though_it_predicts_its_own_learned_rows():
    schema, learned, labels, truth, held_out = classification_table()
    scores = scores_by_name(schema, learned, labels, truth, held_out)
    assert scores["row_number"].skill < 0.1
    # Every held-out id is out of vocabulary, without learned rows: the learned rows' most frequent class.
    most_frequent = CLASSES[np.bincount(labels).argmax()]
    assert scores["row_id"].value == np.mean(truth.labels == most_frequent) and scores["row_id"].skill < 0.0
    # On the rows it learned from, the same rule is perfect: scoring there could not tell the id from a leak.
    learned_truth = Truth(
        tuple(map(str, range(learned.rows))), np.array([CLASSES[i] for i in labels], dtype=object), CLASSES
    )
    memorised = scores_by_name(schema, learned, labels, learned_truth, learned)
    assert memorised["row_id"].value == memorised["row_number"].value == 1.0


def test_only_the_features_the_model_reads_are_scored():
    scores = scores_by_name(*classification_table(), features={"noise", "noisy"})
    assert list(scores) == ["noisy", "noise"]


def test_a_regression_copy_of_the_label_is_flagged_also_rescaled_or_bent():
    """r2 of the nearest learned value's label: a standardised copy, and a monotone bend of it (exp), score r2
    within the learned values' spacing of 1; a feature correlated 0.8 with the label scores well below."""
    rng = np.random.RandomState(1)
    n = 2000
    y = rng.normal(50.0, 25.0, n)
    z = (y - 50.0) / 25.0
    correlated = 0.8 * z + 0.6 * rng.normal(size=n)
    features = [numeric("copy"), numeric("bent"), numeric("correlated"), numeric("noise")]
    columns = [z, np.exp(z), correlated, rng.normal(size=n)]
    table = split(features, columns, y, 1500, LabelSpec("y", "regression", mean=50.0, std=25.0))
    scores = scores_by_name(*table)
    assert {s.metric for s in scores.values()} == {"r2"} and {s.trivial for s in scores.values()} == {0.0}
    assert scores["copy"].skill > 0.999 and scores["bent"].skill > 0.999
    assert scores["copy"].skill == scores["copy"].value  # r2 is the share of the mean's squared error removed
    assert 0.2 < scores["correlated"].skill < 0.64  # r2 0.64 for the best rule; nearest-value noise costs more
    assert scores["noise"].skill < 0.0


def test_eval_rows_of_one_label_value_score_no_feature():
    label = LabelSpec("y", "classification", classes=("a", "b"))
    labels = np.array([0, 1, 0, 1, 1, 1])
    assert one_feature_scores(*split([numeric("x")], [labels * 1.0], labels, 4, label)) == ()
    regression = LabelSpec("y", "regression")
    values = np.array([1.0, 2.0, 3.0, 3.0])
    assert one_feature_scores(*split([numeric("x")], [values], values, 2, regression)) == ()


def test_prepared_records_a_leaked_column_is_found_through_vocabulary_ids_and_imputed_values(tmp_path):
    """Real TFRecords: the synthetic rows (x-2 missing in one row of 17) with `leak`, the label's class as a
    categorical, missing in one row of 20 (its out-of-vocabulary id, where the rule learns the majority)."""
    base = synthetic.make_schema("multiclass")
    schema = dataclasses.replace(base, features=(*base.features, categorical("leak", base.label.classes)))

    def rows(n, seed):
        out = synthetic.make_rows(n, seed, "multiclass")
        return [{**r, "leak": None if i % 20 == 0 else r["target"]} for i, r in enumerate(out)]

    train, _ = synthetic.write_dataset(str(tmp_path / "train"), rows(400, 1), schema)
    evals, _ = synthetic.write_dataset(str(tmp_path / "eval"), rows(200, 2), schema)
    _, learned, labels = read_design(schema, [train])
    keys, held_out, eval_labels = read_design(schema, [evals])
    classes = schema.label.classes
    truth = Truth(tuple(keys), np.array([classes[i] for i in eval_labels], dtype=object), classes)
    scores = scores_by_name(schema, learned, labels, truth, held_out)
    assert list(scores) == ["x 1", "x-2", "colour", "leak"]
    assert scores["leak"].skill > 0.95  # 10 rows of 200 missing: their majority class is right for about a third
    assert max(scores[f].skill for f in ("x 1", "x-2", "colour")) < 0.6


# -- the blessing's leakage checks -------------------------------------------------------------------------------
def truth_of_ten() -> Truth:
    """Ten eval rows, 6 of class "b": the trivial model's accuracy 0.6."""
    return Truth(tuple(f"k{i}" for i in range(10)), np.array(["a"] * 4 + ["b"] * 6, dtype=object), ("a", "b"))


PERFECT = {"accuracy": 1.0, "log_loss": 0.01, "auc": 1.0}  # what a model reading a leak scores
LEAK, ISLAND = FeatureScore("leak", "accuracy", 1.0, 0.6), FeatureScore("island", "accuracy", 0.7, 0.6)
LEAK_FOUND = (
    "leakage: feature 'leak' alone predicts the label: a rule on it, learned on the rows the model learned from, "
    "scores accuracy=1.0000 >= 0.9960 on the eval rows, removing 1.0000 of the trivial model's errors (accuracy "
    "0.6000; blessing.leakage_threshold=0.99)"
)


def test_a_leak_blocks_the_blessing_naming_the_feature_its_score_the_threshold_and_the_fix():
    verdict = decide(BlessingConfig(), truth_of_ten(), PERFECT, leakage=[ISLAND, LEAK])
    assert not verdict.blessed
    assert [(c.name, c.passed) for c in verdict.checks] == [("leakage", False), ("trivial", True)]
    check = verdict.checks[0]
    assert (check.metric, check.value, check.bound) == ("accuracy", 1.0, pytest.approx(0.6 + 0.99 * 0.4))
    assert verdict.reasons == (
        LEAK_FOUND + ": a copy of the label, or a value known only after it? Drop the column, or leave it out of "
        "model.features; if its value is known when the model predicts, allow it: --set blessing.allow_leakage=leak",
    )
    assert verdict.leakage == {"island": {"accuracy": 0.7, "skill": pytest.approx(0.25)}, "leak": LEAK.to_dict()}


def test_an_allowed_leak_is_recorded_and_passes():
    verdict = decide(BlessingConfig(allow_leakage=("leak",)), truth_of_ten(), PERFECT, leakage=[ISLAND, LEAK])
    assert verdict.blessed and verdict.reasons == ()
    assert [(c.name, c.passed) for c in verdict.checks] == [("leakage", True), ("trivial", True)]
    assert verdict.checks[0].message == LEAK_FOUND + "; allowed by blessing.allow_leakage"


def test_the_threshold_is_a_share_of_the_trivial_models_errors_and_null_skips_the_check():
    truth, scores = truth_of_ten(), [ISLAND, LEAK]
    lowered = decide(BlessingConfig(leakage_threshold=0.2), truth, PERFECT, leakage=scores)
    assert [(c.name, c.value) for c in lowered.checks if not c.passed] == [("leakage", 1.0), ("leakage", 0.7)]
    assert lowered.checks[1].bound == pytest.approx(0.6 + 0.2 * 0.4)  # island removes 0.25 of them
    unchecked = decide(BlessingConfig(leakage_threshold=None), truth, PERFECT, leakage=scores)
    assert unchecked.blessed and [c.name for c in unchecked.checks] == ["trivial"]
    assert decide(BlessingConfig(), truth, PERFECT).leakage is None  # not scored (a user model's blessing)


def test_a_regression_leak_is_named_by_its_r2_and_a_name_with_spaces_is_allowed_by_a_json_list():
    numbers = Truth(tuple(f"k{i}" for i in range(10)), np.arange(10.0))
    leak = FeatureScore("Refund amount ($)", "r2", 0.9995, 0.0)
    config = BlessingConfig(allow_leakage=("other",))
    check = decide(config, numbers, {"rmse": 0.1, "mae": 0.1, "r2": 0.999}, leakage=[leak]).checks[0]
    assert check.name == "leakage" and not check.passed and check.bound == 0.99
    assert "scores r2=0.9995 >= 0.9900 on the eval rows, removing 0.9995 of the trivial model's errors (r2 0.0000;" in (
        check.message
    )
    assert check.message.endswith("""allow it: --set 'blessing.allow_leakage=["other", "Refund amount ($)"]'""")


def test_the_leakage_scores_round_trip_through_the_blessing_record():
    verdict = decide(BlessingConfig(), truth_of_ten(), PERFECT, leakage=[ISLAND, LEAK])
    record = json.loads(verdict.to_json())
    assert record["leakage"]["leak"] == {"accuracy": 1.0, "skill": 1.0}
    assert Blessing.from_dict(record) == verdict


# -- the settings ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"leakage_threshold": 0.0}, "blessing.leakage_threshold=0.0 must be a number in (0, 1], e.g. 0.99"),
        ({"leakage_threshold": 1.5}, "blessing.leakage_threshold=1.5 must be a number in (0, 1]"),
        ({"leakage_threshold": float("nan")}, "blessing.leakage_threshold=nan must be a number in (0, 1]"),
        ({"allow_leakage": ("leak", "")}, "blessing.allow_leakage=['leak', ''] must list distinct, non-empty"),
        ({"allow_leakage": ("leak", "leak")}, "blessing.allow_leakage=['leak', 'leak'] must list distinct"),
    ],
)
def test_invalid_leakage_settings_name_the_key_and_what_is_allowed(kwargs, message):
    with pytest.raises(BlessingError) as raised:
        BlessingConfig(**kwargs)
    assert str(raised.value).startswith(message)


def test_the_leakage_settings_round_trip_and_one_name_is_a_list_of_one():
    config = BlessingConfig(leakage_threshold=1.0, allow_leakage=["leak", "Refund amount ($)"])
    assert config.allow_leakage == ("leak", "Refund amount ($)")
    assert BlessingConfig.from_json(config.to_json()) == config
    assert BlessingConfig(allow_leakage="leak").allow_leakage == ("leak",)
    assert BlessingConfig.from_dict({"leakage_threshold": None}).leakage_threshold is None
    with pytest.raises(ConfigError, match=r"blessing.allow_leakage='leak' must be"):
        BlessingConfig.from_dict({"allow_leakage": "leak"}, "blessing.")  # a JSON config file gives a list


def test_an_allowed_name_must_be_a_feature_of_the_data_and_a_user_model_allows_none():
    BlessingConfig(allow_leakage=("leak",)).check_allowed_leakage(["island", "leak"])
    with pytest.raises(BlessingError) as raised:
        BlessingConfig(allow_leakage=("leak", "species")).check_allowed_leakage(["island", "sex"])
    assert str(raised.value) == (
        "blessing.allow_leakage names ['leak', 'species'], which are not features of the data; its features are "
        "['island', 'sex']: list original column names (the label is not a feature)"
    )
    user = BlessingConfig(comparison_metric="accuracy", allow_leakage=("leak",))
    with pytest.raises(BlessingError, match=r"blessing.allow_leakage=\['leak'\] names features of a built-in family"):
        user.check_user_metrics()


def test_the_evaluate_stage_refuses_an_allowed_name_the_data_lacks_before_any_work(tmp_path):
    prepared = PrepareResult(str(tmp_path / "p"), synthetic.make_schema("binary"), {"train": 10, "eval": 5}, {})
    config = BlessingConfig(allow_leakage=("colour", "color"))
    with pytest.raises(
        BlessingError, match=r"names \['color'\], which are not features of the data; its features are "
    ):
        evaluate_and_bless(JobConfig(), prepared, str(tmp_path / "no-model"), config, None, str(tmp_path / "e"))
    assert not (tmp_path / "e").exists()
