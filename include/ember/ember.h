// The one header of ember's public C++ API.
#pragma once
#include "ember/cuda.h"
#include "ember/device.h"
#include "ember/dtype.h"
#include "ember/error.h"
#include "ember/linalg.h"
#include "ember/ops.h"
#include "ember/safetensors.h"
#include "ember/scalar.h"
#include "ember/scalar_types.h"
#include "ember/tensor.h"
