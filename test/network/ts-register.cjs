// Minimal require hook so plain `node` child processes (and bench/proxy.js) can load lib/**/*.ts:
// TypeScript's transpileModule, CommonJS output, no type checking.
'use strict';
const fs = require('fs');
const ts = require('typescript');

require.extensions['.ts'] = function compileTs(module, filename) {
  const source = fs.readFileSync(filename, 'utf8');
  const { outputText } = ts.transpileModule(source, {
    fileName: filename,
    compilerOptions: {
      module: ts.ModuleKind.CommonJS,
      target: ts.ScriptTarget.ES2022,
      esModuleInterop: true,
      sourceMap: false,
    },
  });
  module._compile(outputText, filename);
};
