// Status (status.h).
// Tests: see status.h.
#include "status.h"

namespace psb {

const char* ErrorCodeName(ErrorCode code) noexcept {
  switch (code) {
#define PSB_ERROR(name, text) \
  case ErrorCode::k##name:    \
    return #name;
#include "error_codes.def"
#undef PSB_ERROR
    default:
      return "ESPAWN";
  }
}

}  // namespace psb
