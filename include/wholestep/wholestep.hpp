// wholestep: compile a whole training step into one graph and run it fast.
#pragma once

#include "wholestep/check.hpp"
#include "wholestep/gradcheck.hpp"
#include "wholestep/checkpoint.hpp"
#include "wholestep/compare.hpp"
#include "wholestep/data.hpp"
#include "wholestep/dtype.hpp"
#include "wholestep/error.hpp"
#include "wholestep/evaluate.hpp"
#include "wholestep/models.hpp"
#include "wholestep/nn.hpp"
#include "wholestep/optim.hpp"
#include "wholestep/step.hpp"
#include "wholestep/tensor.hpp"
