// Writes dist/index.mjs and dist/index.d.mts: the ESM entry re-exports the CommonJS build and its
// declarations (one implementation, two module systems), and marks the CLI executable.
'use strict';
const fs = require('node:fs');
const path = require('node:path');

const dist = path.join(__dirname, '..', 'dist');
// One ESM entry per CommonJS entry point of "exports": the package root and the srt drop-in.
for (const entry of ['index', path.join('srt', 'index')]) {
  const js = path.join(dist, `${entry}.js`);
  if (!fs.existsSync(js)) continue;
  const names = Object.keys(require(js)).filter((n) => n !== 'default' && n !== '__esModule');
  const lines = [
    "import { createRequire } from 'node:module';",
    'const require = createRequire(import.meta.url);',
    "const m = require('./index.js');",
    ...names.map((n) => `export const ${n} = m.${n};`),
    'export default m;',
    '',
  ];
  fs.writeFileSync(path.join(dist, `${entry}.mjs`), lines.join('\n'));
  // ESM declarations for the ESM entry: a copy of index.d.ts would import './backend' etc.
  // without extensions, which node16/nodenext reject in an ES module (TS2835) and which silently
  // become `any` under skipLibCheck. Re-export the CommonJS declarations instead, exactly as
  // index.mjs re-exports the CommonJS build: named exports plus module.exports as the default.
  fs.writeFileSync(
    path.join(dist, `${entry}.d.mts`),
    [
      "export * from './index.js';",
      "import m from './index.js';",
      'export default m;',
      '',
    ].join('\n'),
  );
}
const cli = path.join(dist, 'cli.js');
if (fs.existsSync(cli)) fs.chmodSync(cli, 0o755);
