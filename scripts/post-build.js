// Writes dist/index.mjs: the ESM entry re-exports the CommonJS build (one implementation, two
// module systems), and marks the CLI executable.
'use strict';
const fs = require('node:fs');
const path = require('node:path');

const dist = path.join(__dirname, '..', 'dist');
const names = Object.keys(require(path.join(dist, 'index.js'))).filter((n) => n !== 'default' && n !== '__esModule');
const lines = [
  "import { createRequire } from 'node:module';",
  'const require = createRequire(import.meta.url);',
  "const m = require('./index.js');",
  ...names.map((n) => `export const ${n} = m.${n};`),
  'export default m;',
  '',
];
fs.writeFileSync(path.join(dist, 'index.mjs'), lines.join('\n'));
fs.copyFileSync(path.join(dist, 'index.d.ts'), path.join(dist, 'index.d.mts'));
const cli = path.join(dist, 'cli.js');
if (fs.existsSync(cli)) fs.chmodSync(cli, 0o755);
