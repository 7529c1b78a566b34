"""The kinds of program a compile makes, and the stages each goes through.

An internal enum (a StrEnum, for the reason fusionlens/ir/vocabulary.py gives): the compiler
compares `program.kind is ProgramKind.BACKWARD`; fusionlens/driver/wire.py turns it into the
report's `ProgramReport.kind` string. Autograd's split is what makes a backward program.
"""

from __future__ import annotations

import enum

from fusionlens.ir.vocabulary import Stage


class ProgramKind(enum.StrEnum):
    """A compile's programs, in the order it makes them (and the report lists them)."""

    FORWARD = "forward"  # an inference program, or a training step's forward half
    BACKWARD = "backward"  # a training step's backward half (autograd's split)


# Each kind's stages in pipeline order (fusionlens/driver/pipeline.py): a forward program has
# JOINT and FORWARD only when compiled for training; a backward starts at its half of the joint.
STAGES: dict[ProgramKind, tuple[Stage, ...]] = {
    ProgramKind.FORWARD: (Stage.ACQUIRED, Stage.DECOMPOSED, Stage.OPTIMISED, Stage.JOINT, Stage.FORWARD,
                          Stage.FUSION, Stage.EXECUTION),
    ProgramKind.BACKWARD: (Stage.BACKWARD, Stage.FUSION, Stage.EXECUTION),
}
