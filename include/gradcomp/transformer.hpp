#pragma once
// gradcomp's transformer layer (host side): tensor layouts and roles, ready-made layouts of
// published models, per-role routing, the AccTFM hybrid for tensor parallelism, the overlap
// planner and per-chunk telemetry (docs/transformers.md).

#include "transformer/layout.hpp"
#include "transformer/acctfm.hpp"
#include "transformer/models.hpp"
#include "transformer/planner.hpp"
#include "transformer/router.hpp"
#include "transformer/split.hpp"
#include "transformer/tagc.hpp"
#include "transformer/telemetry.hpp"
