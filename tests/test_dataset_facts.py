"""The one record of what a model trained on a data set must know (alternet.dataset_facts.DataFacts): a data
module's facts, a checkpoint's ``data`` hyperparameters (the dict form, read back exactly) and the public data sets'
own."""

import pytest

from alternet.dataset_facts import FACTS, DataFacts

from helpers import datamodule_of, resolved


def test_a_data_modules_facts_round_trip_through_the_checkpoints_form():
    facts = datamodule_of(resolved("data=digits")).facts()
    assert (facts.name, facts.num_classes, facts.image_size) == ("digits", 10, 16)
    assert facts.class_names == tuple(str(i) for i in range(10))
    plain = facts.to_dict()
    assert plain == {
        "name": "digits",
        "num_classes": 10,
        "image_size": 16,
        "mean": list(facts.mean),
        "std": list(facts.std),
        "class_names": list(facts.class_names),
    }  # the keys every checkpoint since the first has held, no None written
    assert DataFacts.from_dict(plain) == facts


def test_older_and_wider_sections_read_and_a_short_one_is_named():
    older = {"name": "cifar100", "num_classes": 100, "image_size": 32, "mean": [0.5] * 3, "std": [0.2] * 3}
    assert DataFacts.from_dict(older).class_names is None  # saved before the files were read
    export = {**older, "val_size": 0, "root": "/data"}  # an export's section holds more than the facts
    assert DataFacts.from_dict(export) == DataFacts.from_dict(older)
    with pytest.raises(ValueError, match="the data facts lack name, image_size"):
        DataFacts.from_dict({"num_classes": 10, "mean": [0.5] * 3, "std": [0.5] * 3})


def test_the_public_data_sets_are_named_by_their_key():
    assert all(facts.name == key for key, facts in FACTS.items())
    assert FACTS["cifar100"].num_classes == 100 and FACTS["in1k"].image_size == 224
