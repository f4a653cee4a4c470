'use strict';
// Shared by the ali-ons scripts the Rust tests spawn (tests/rocketmq_client/completeness.rs, acl.rs).
// Every script prints one JSON object per line on stdout; diagnostics go to stderr.

function parseArgs(argv) {
  const out = { props: {}, keys: [] };
  for (let i = 2; i < argv.length; i++) {
    const a = argv[i];
    const v = argv[i + 1];
    switch (a) {
      case '--namesrv': out.namesrv = v; i++; break;
      case '--topic': out.topic = v; i++; break;
      case '--group': out.group = v; i++; break;
      case '--count': out.count = Number(v); i++; break;
      case '--queues': out.queues = Number(v); i++; break;
      case '--tag': out.tag = v; i++; break;
      case '--key': out.keys.push(v); i++; break;
      case '--prop': { const [k, ...rest] = v.split('='); out.props[k] = rest.join('='); i++; break; }
      case '--sub': out.sub = v; i++; break;
      case '--body': out.body = v; i++; break;
      case '--instance': out.instance = v; i++; break;
      case '--from-first': out.fromFirst = true; break;
      case '--retry-first': out.retryFirst = true; break;
      case '--max-ms': out.maxMs = Number(v); i++; break;
      case '--access-key': out.accessKey = v; i++; break;
      case '--secret-key': out.secretKey = v; i++; break;
      case '--denied-topic': out.deniedTopic = v; i++; break;
      default: throw new Error('unknown argument ' + a);
    }
  }
  if (!out.namesrv || !out.topic) throw new Error('--namesrv and --topic are required');
  return out;
}

// ali-ons asserts that an httpclient is given even with nameSrv set, in which case it never
// calls it (no Aliyun HTTP name-server lookup). A stub that fails loudly if it ever is.
const offlineHttpclient = {
  async request(url) { throw new Error('ali-ons tried an HTTP name-server lookup: ' + url); },
};

const stderrLogger = {
  info() {}, debug() {},
  warn(...a) { console.error('[ali-ons warn]', ...a); },
  error(...a) { console.error('[ali-ons error]', ...a); },
};

function baseOptions(args) {
  const o = {
    nameSrv: args.namesrv,
    httpclient: offlineHttpclient,
    logger: stderrLogger,
    clientIP: '127.0.0.1',
    pollNameServerInteval: 1000, // (sic) ali-ons' spelling; routes appear within a second
    heartbeatBrokerInterval: 5000,
  };
  if (args.instance) o.instanceName = args.instance;
  // ali-ons signs every request when both are set (lib/channel.js, beforeRequest).
  if (args.accessKey) o.accessKey = args.accessKey;
  if (args.secretKey) o.secretKey = args.secretKey;
  return o;
}

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

module.exports = { parseArgs, baseOptions, emit };
