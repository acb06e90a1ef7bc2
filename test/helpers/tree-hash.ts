/**
 * A tree's identity for the changes tests: every name under root with its type, mode and content
 * (sha256) or symlink target, in sorted order. Two trees are the same when their hashes are.
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

export function treeListing(root: string): string[] {
  const out: string[] = [];
  const walk = (dir: string, rel: string) => {
    for (const name of fs.readdirSync(dir).sort()) {
      const p = path.join(dir, name);
      const r = rel === '' ? name : `${rel}/${name}`;
      const st = fs.lstatSync(p);
      const mode = (st.mode & 0o7777).toString(8);
      if (st.isSymbolicLink()) out.push(`${r} symlink -> ${fs.readlinkSync(p)}`);
      else if (st.isDirectory()) {
        out.push(`${r} dir ${mode}`);
        walk(p, r);
      } else if (st.isFile()) out.push(`${r} file ${mode} ${createHash('sha256').update(fs.readFileSync(p)).digest('hex')}`);
      else out.push(`${r} other ${st.mode.toString(8)}`);
    }
  };
  walk(root, '');
  return out;
}

export function treeHash(root: string): string {
  return createHash('sha256').update(treeListing(root).join('\n')).digest('hex');
}
