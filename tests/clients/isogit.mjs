// isomorphic-git driver for the gixd client matrix (tests/clients/matrix.py). HTTP only.
//
//   node isogit.mjs clone URL DIR [--depth N] [--protocol V] [--bare]
//   node isogit.mjs fetch DIR [--protocol V]
//   node isogit.mjs push DIR SRC:DST [--force]
//   node isogit.mjs delete DIR REFNAME
//
// isomorphic-git is loaded from $GIXD_CLIENTS_CACHE/node_modules (tests/clients/install.sh puts it
// there). Its clone/fetch/push speak protocol v0/v1 only (v2 is for listServerRefs alone): --protocol
// v2 exits 3, and so does a git:// URL.
import fs from 'node:fs'
import path from 'node:path'
import { createRequire } from 'node:module'

function die(code, msg) {
  process.stderr.write(`isogit: ${msg}\n`)
  process.exit(code)
}

const cache = process.env.GIXD_CLIENTS_CACHE
if (!cache) die(3, 'GIXD_CLIENTS_CACHE is not set (the directory holding node_modules/isomorphic-git)')
const require = createRequire(path.join(path.resolve(cache), 'package.json'))
let git, http
try {
  git = require('isomorphic-git')
  http = require('isomorphic-git/http/node')
} catch (e) {
  die(3, `isomorphic-git is not installed under ${cache}/node_modules: ${e.message}`)
}

const argv = process.argv.slice(2)
const cmd = argv.shift()
const pos = []
const opt = { depth: 0, protocol: null, bare: false, force: false }
for (let i = 0; i < argv.length; i++) {
  const a = argv[i]
  if (a === '--depth') opt.depth = parseInt(argv[++i], 10)
  else if (a === '--protocol') opt.protocol = argv[++i]
  else if (a === '--bare') opt.bare = true
  else if (a === '--force') opt.force = true
  else if (a.startsWith('--')) die(2, `unknown option ${a}`)
  else pos.push(a)
}
if (opt.protocol && !/^v?[01]$/.test(opt.protocol)) {
  die(3, `isomorphic-git ${git.version()} clones and fetches with protocol v1 only (asked for ${opt.protocol})`)
}

const user = process.env.GIXD_CLIENT_USER || ''
const password = process.env.GIXD_CLIENT_PASSWORD || ''
let authTries = 0
const auth = {
  onAuth: () => {
    if (!user && !password) return { cancel: true }
    return { username: user, password }
  },
  onAuthFailure: () => {
    authTries += 1
    if (authTries > 2) return { cancel: true }
    return { username: user, password }
  },
}

function dirs(dir, bare) {
  if (bare || (!fs.existsSync(path.join(dir, '.git')) && fs.existsSync(path.join(dir, 'HEAD')))) {
    return { dir, gitdir: dir, bare: true }
  }
  return { dir, gitdir: path.join(dir, '.git'), bare: false }
}

function checkUrl(url) {
  if (!/^https?:\/\//.test(url)) die(3, `isomorphic-git has no transport for ${url.split(':')[0]}:// (HTTP only)`)
}

async function main() {
  if (cmd === 'clone') {
    if (pos.length !== 2) die(2, 'usage: clone URL DIR')
    const [url, dir] = pos
    checkUrl(url)
    const d = dirs(dir, opt.bare)
    await git.clone({
      fs, http, ...auth, dir: d.dir, gitdir: d.gitdir, url,
      depth: opt.depth || undefined, noCheckout: d.bare, singleBranch: false, noTags: false,
    })
    if (d.bare) await git.setConfig({ fs, gitdir: d.gitdir, path: 'core.bare', value: true })
    return
  }
  if (pos.length < 1) die(2, 'usage: fetch|push|delete DIR ...')
  const d = dirs(pos[0], false)
  const url = await git.getConfig({ fs, gitdir: d.gitdir, path: 'remote.origin.url' })
  if (!url) die(1, 'no remote.origin.url')
  checkUrl(url)
  if (cmd === 'fetch') {
    await git.fetch({ fs, http, ...auth, dir: d.dir, gitdir: d.gitdir, remote: 'origin', tags: true, singleBranch: false })
    return
  }
  if (cmd === 'push' || cmd === 'delete') {
    if (pos.length !== 2) die(2, 'usage: push DIR SRC:DST | delete DIR REF')
    let ref, remoteRef
    if (cmd === 'delete') {
      ref = pos[1]
      remoteRef = pos[1]
    } else {
      const spec = pos[1].replace(/^\+/, '')
      const colon = spec.indexOf(':')
      if (colon < 0) { ref = spec; remoteRef = spec } else { ref = spec.slice(0, colon); remoteRef = spec.slice(colon + 1) }
    }
    const res = await git.push({
      fs, http, ...auth, dir: d.dir, gitdir: d.gitdir, remote: 'origin', ref, remoteRef,
      force: opt.force || pos[1].startsWith('+'), delete: cmd === 'delete',
    })
    const bad = Object.entries(res.refs || {}).filter(([, v]) => !v.ok)
    if (!res.ok || bad.length) die(1, `push rejected: ${bad.map(([k, v]) => `${k}: ${v.error}`).join('; ') || res.error}`)
    return
  }
  die(2, `unknown command ${cmd}`)
}

main().catch((e) => {
  if (e.code === 'UserCanceledError') {
    die(1, `the server asked for credentials (HTTP 401) and ${user || password ? 'refused GIXD_CLIENT_USER/GIXD_CLIENT_PASSWORD' : 'GIXD_CLIENT_USER/GIXD_CLIENT_PASSWORD are not set'}`)
  }
  die(1, `${e.code || e.name}: ${e.message}${e.data && Object.keys(e.data).length ? ' ' + JSON.stringify(e.data) : ''}`)
})
