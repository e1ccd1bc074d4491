#include "model/recompute.h"

namespace ft::model {
namespace {

thread_local bool in_recompute = false;

}  // namespace

bool recomputing() {
  return in_recompute;
}

RecomputeScope::RecomputeScope() : previous_(in_recompute) {
  in_recompute = true;
}

RecomputeScope::~RecomputeScope() {
  in_recompute = previous_;
}

}  // namespace ft::model
