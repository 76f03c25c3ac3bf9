"""A fork server for the tests that kill training runs: a process imports torch (and a framework)
once, then forks one child per run it reads from stdin, so a run costs a fork rather than a fresh
interpreter. The parent kills the children; each is reaped only on request, so its pid cannot be
reused by another process before the parent is done with it. `serve(run)` is the server's loop;
`Zygote` starts one and talks to it."""
import json, os, subprocess, sys, traceback
from pathlib import Path

def serve(run):
    "Read JSON commands from stdin: {'op': 'run', 'args': {...}} forks `run(**args)`; 'wait' reaps."
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd['op'] == 'run':
            pid = os.fork()
            if pid == 0:
                os.dup2(2, 1)  # the child's output must not mix with the protocol on stdout
                code = 0
                try: run(**cmd['args'])
                except BaseException:
                    traceback.print_exc()
                    code = 1
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
            print(json.dumps({'pid': pid}), flush=True)
        elif cmd['op'] == 'wait':
            _, st = os.waitpid(cmd['pid'], 0)
            print(json.dumps({'signal': os.WTERMSIG(st) if os.WIFSIGNALED(st) else 0,
                              'code': os.WEXITSTATUS(st) if os.WIFEXITED(st) else None}), flush=True)

class Zygote:
    "A server started as `cmd` (its errors in `err`); `run(**args)` forks a run and waits for it."
    def __init__(self, cmd:list, env:dict, err:Path, cwd=None):
        self.err = open(err, 'w')
        self.p = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.err, text=True, cwd=cwd)
    def _ask(self, **cmd)->dict:
        self.p.stdin.write(json.dumps(cmd) + '\n')
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        assert line, f'zygote died: {self.errors()}'
        return json.loads(line)
    def errors(self)->str: return Path(self.err.name).read_text()[-3000:]
    def start(self, **args)->int:
        return self._ask(op='run', args={k: str(v) if isinstance(v, Path) else v
                                         for k, v in args.items()})['pid']
    def wait(self, pid:int)->dict: return self._ask(op='wait', pid=pid)
    def run(self, **args)->dict: return self.wait(self.start(**args))
    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=60)
        self.err.close()
