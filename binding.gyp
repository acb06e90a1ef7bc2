{
  'targets': [{
    # The ONLY .node target (prebuildify and node-gyp-build both take the first .node they find).
    # Sources come from native/sources.json, which the Windows cmake-js build reads too.
    'target_name': 'process_sandbox',
    'sources': ["<!@(node -p \"require('./native/sources.json').common.join(' ')\")"],
    'dependencies': ["<!(node -p \"require('node-addon-api').targets\"):node_addon_api_except"],
    # NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS: a callback that fails while a Worker's env is being
    # torn down (an AsyncWorker's OnOK calling JS) must not turn into a C++ exception that escapes
    # into libuv and aborts the whole host ("terminate called after throwing Napi::Error").
    'defines': ['NAPI_VERSION=8', 'NODE_ADDON_API_DISABLE_DEPRECATED', 'NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS'],
    'conditions': [
      ['OS=="linux"', {
        'sources': ["<!@(node -p \"require('./native/sources.json').linux.join(' ')\")"],
        'cflags_cc': ['-std=c++17', '-Wall', '-Wextra', '-fstack-protector-strong',
                      '-fvisibility=hidden', '-D_GNU_SOURCE', '-O2'],
        'ldflags': ['-Wl,-z,relro,-z,now', '-Wl,--exclude-libs,ALL'],
      }],
      ['OS=="mac"', {
        'sources': ["<!@(node -p \"require('./native/sources.json').mac.join(' ')\")"],
        'xcode_settings': {'CLANG_CXX_LANGUAGE_STANDARD': 'c++17', 'GCC_ENABLE_CPP_EXCEPTIONS': 'YES',
                           'GCC_SYMBOLS_PRIVATE_EXTERN': 'YES', 'MACOSX_DEPLOYMENT_TARGET': '11.0'},
      }],
      ['OS=="win"', {
        'sources': ["<!@(node -p \"require('./native/sources.json').win.join(' ')\")"],
        'defines': ['UNICODE', '_UNICODE', 'WIN32_LEAN_AND_MEAN', 'NOMINMAX'],
        'libraries': ['-ladvapi32', '-luser32'],
        'msvs_settings': {
          'VCCLCompilerTool': {'ExceptionHandling': 1, 'AdditionalOptions': ['/std:c++17', '/guard:cf', '/sdl', '/W3']},
          'VCLinkerTool': {'AdditionalOptions': ['/DYNAMICBASE', '/guard:cf']},
        },
      }],
    ],
  }],
}
