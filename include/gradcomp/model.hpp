#pragma once
// gradcomp's model layer (host side): tensor layouts and roles, ready-made layouts of
// published models, per-role routing, the AccTFM hybrid for tensor parallelism, the overlap
// planner and per-chunk telemetry (docs/model.md).

#include "model/layout.hpp"
#include "model/acctfm.hpp"
#include "model/published.hpp"
#include "model/planner.hpp"
#include "model/router.hpp"
#include "model/split.hpp"
#include "model/tagc.hpp"
#include "model/telemetry.hpp"
