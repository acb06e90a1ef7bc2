// macOS needs no native mechanism yet: Seatbelt is applied by /usr/bin/sandbox-exec, which the TS
// backend (lib/platform/darwin.ts) launches. The addon still loads so probe() can report it.
// Tests: none (no test loads the addon on macOS; test/darwin/seatbelt.test.ts covers the profiles).
#include <napi.h>

#include "../addon_data.h"

namespace psb {

void InitPlatform(Napi::Env env, Napi::Object exports) { exports.Set("platform", Napi::String::New(env, "darwin")); }

}  // namespace psb
