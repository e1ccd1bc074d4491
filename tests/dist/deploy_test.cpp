// The deployment files users copy (deploy/slurm/finetune.sbatch, deploy/kubernetes/finetune-job.yaml, shown in
// docs/deploy.md): their offline checks (bash -n, shellcheck, the manifest's fields through yaml-cpp), and the very
// files run on one host. Slurm: the script under stand-ins for srun (tasks on this host with Slurm's per-task
// variables) and scontrol (hostlist expansion), each task a dist_worker that joins the run. Kubernetes: the pod
// command, expanded as Kubernetes expands $(VAR), as two pods (nodes) of 2 CPU ranks.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <map>
#include <regex>
#include <string>

#include "nodes_support.h"

namespace ft::test {
namespace {

namespace fs = std::filesystem;

const char* const kSlurmScript = "deploy/slurm/finetune.sbatch";
const char* const kJobManifest = "deploy/kubernetes/finetune-job.yaml";

std::string worker() {
  const char* v = std::getenv("FT_DIST_WORKER");
  return v != nullptr && *v != '\0' ? v : FT_DIST_WORKER_PATH;
}

bool have(const std::string& tool) {
  return run("command -v " + tool + " >/dev/null").exit_code == 0;
}

// The code block that follows "<!-- file: PATH -->" in docs/deploy.md.
std::string docs_block(const std::string& path) {
  const std::string docs = read_file(source_dir() / "docs" / "deploy.md");
  const auto marker = docs.find("<!-- file: " + path + " -->");
  if (marker == std::string::npos) return "(no marker for " + path + ")";
  const auto fence = docs.find("```", marker);
  const auto start = docs.find('\n', fence) + 1;
  const auto end = docs.find("\n```", start);
  return docs.substr(start, end + 1 - start);
}

TEST(DeployDocs, DeployMdShowsTheDeployFilesAsTheyAre) {
  for (const char* path : {kSlurmScript, kJobManifest}) {
    EXPECT_EQ(docs_block(path), read_file(source_dir() / path)) << path;
  }
}

// ---- Slurm

TEST(DeploySlurm, ScriptParses) {
  const auto result = run("bash -n " + shell_quote((source_dir() / kSlurmScript).string()));
  EXPECT_EQ(result.exit_code, 0) << result.output;
}

TEST(DeploySlurm, ScriptPassesShellcheck) {
  if (!have("shellcheck")) GTEST_SKIP() << "no shellcheck: scripts/setup.sh installs it (third_party/apt-packages.txt)";
  const auto result =
      run("shellcheck --shell=bash --severity=info " + shell_quote((source_dir() / kSlurmScript).string()));
  EXPECT_EQ(result.exit_code, 0) << result.output;
}

// Stand-ins on PATH: srun starts SLURM_NNODES x SLURM_NTASKS_PER_NODE tasks here, each with the variables Slurm gives
// a task under the default block distribution; scontrol expands a hostlist as `scontrol show hostnames` does; finetune
// records what its task got, then (with STUB_JOIN) joins the run as a dist_worker.
void write_slurm_stubs(const fs::path& bin) {
  write_file(bin / "srun", R"(#!/bin/bash
while [[ $1 == --* ]]; do shift; done  # --container-image=..., --container-mounts=...: no containers here
pids=()
for ((node = 0; node < SLURM_NNODES; node++)); do
  for ((local = 0; local < SLURM_NTASKS_PER_NODE; local++)); do
    SLURM_PROCID=$((node * SLURM_NTASKS_PER_NODE + local)) SLURM_LOCALID=$local SLURM_NODEID=$node "$@" &
    pids+=($!)
  done
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=$?; done
exit $status
)");
  write_file(bin / "scontrol", R"(#!/bin/bash
[[ $1 == show && $2 == hostnames ]] || { echo "scontrol stand-in: only 'show hostnames LIST'" >&2; exit 2; }
expand() {  # one item: name, or prefix[1-3,7]suffix with zero-padded ranges
  if [[ $1 =~ ^([^[]*)\[([^]]*)\](.*)$ ]]; then
    local pre=${BASH_REMATCH[1]} post=${BASH_REMATCH[3]} r lo i
    IFS=, read -ra ranges <<<"${BASH_REMATCH[2]}"
    for r in "${ranges[@]}"; do
      if [[ $r == *-* ]]; then
        lo=${r%-*}
        for ((i = 10#$lo; i <= 10#${r#*-}; i++)); do printf '%s%0*d%s\n' "$pre" "${#lo}" "$i" "$post"; done
      else
        echo "$pre$r$post"
      fi
    done
  else
    echo "$1"
  fi
}
list=$3 item= depth=0
for ((k = 0; k < ${#list}; k++)); do
  c=${list:k:1}
  [[ $c == [ ]] && depth=1
  [[ $c == ] ]] && depth=0
  if [[ $c == , && $depth == 0 ]]; then expand "$item"; item=; else item+=$c; fi
done
expand "$item"
)");
  write_file(bin / "finetune",
             "#!/bin/bash\n"
             "echo \"RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE "
             "LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE GROUP_RANK=$GROUP_RANK MASTER_ADDR=$MASTER_ADDR "
             "MASTER_PORT=$MASTER_PORT ARGS=$*\" > \"$STUB_OUT/task$SLURM_PROCID\"\n"
             "[[ -z ${STUB_JOIN:-} ]] || exec " +
                 shell_quote(worker()) + " collectives\n");
  for (const char* name : {"srun", "scontrol", "finetune"}) {
    fs::permissions(bin / name, fs::perms::owner_all, fs::perm_options::add);
  }
}

TEST(DeploySlurm, ScontrolStandInExpandsHostlistsAsSlurmDoes) {
  TempDir dir("ft-slurm");
  write_slurm_stubs(dir / "bin");
  const auto hosts =
      run(shell_quote((dir / "bin" / "scontrol").string()) + " show hostnames 'gpu[08-10,12],login1,rack[1-2]n'");
  EXPECT_EQ(hosts.output, "gpu08\ngpu09\ngpu10\ngpu12\nlogin1\nrack1n\nrack2n\n");
}

// Two nodes of two tasks: SLURM_PROCID p becomes RANK p on node p / 2 with LOCAL_RANK p % 2, the first host of
// SLURM_JOB_NODELIST is MASTER_ADDR, MASTER_PORT is 20000 + SLURM_JOB_ID % 20000 unless exported, and the four
// tasks form one run.
TEST(DeploySlurm, TasksGetTheDocumentedRanksAndFormOneRun) {
  TempDir dir("ft-slurm");
  write_slurm_stubs(dir / "bin");
  const std::string job = "PATH=" + shell_quote((dir / "bin").string()) +
                          ":\"$PATH\" STUB_OUT=" + shell_quote(dir.path().string()) +
                          " SLURM_JOB_ID=4242 SLURM_NNODES=2 SLURM_NTASKS_PER_NODE=2 SLURM_NTASKS=4"
                          " SLURM_JOB_NODELIST='127.0.0.[1-2]' SLURM_NODELIST='127.0.0.[1-2]' OMP_NUM_THREADS=1 ";
  const std::string script = "bash " + shell_quote((source_dir() / kSlurmScript).string());

  const auto recorded = run("env -u MASTER_PORT " + job + script);
  ASSERT_EQ(recorded.exit_code, 0) << recorded.output;
  for (int p = 0; p < 4; ++p) {
    EXPECT_EQ(read_file(dir / ("task" + std::to_string(p))),
              "RANK=" + std::to_string(p) + " LOCAL_RANK=" + std::to_string(p % 2) +
                  " WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 GROUP_RANK=" + std::to_string(p / 2) +
                  " MASTER_ADDR=127.0.0.1 MASTER_PORT=24242 ARGS=train --config /data/my.yaml\n")
        << "task " << p;
  }

  const auto joined =
      run(job + "MASTER_PORT=" + std::to_string(free_port()) + " FINETUNE_CONFIG=/tmp/x.yaml STUB_JOIN=1 " + script);
  ASSERT_EQ(joined.exit_code, 0) << joined.output;
  for (int p = 0; p < 4; ++p) {
    EXPECT_NE(joined.output.find("collectives ok on rank " + std::to_string(p) + " of 4"), std::string::npos)
        << joined.output;
  }
  EXPECT_NE(joined.output.find("rank 3/4 (local 1/2, node 1), store 127.0.0.1:"), std::string::npos) << joined.output;
  EXPECT_NE(read_file(dir / "task3").find("ARGS=train --config /tmp/x.yaml"), std::string::npos);
}

// ---- Kubernetes

std::string fmt_join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

// Kubernetes' expansion of a container's args: $(NAME) becomes the value of the container's variable NAME (left as is
// when there is none), $$ a $.
std::string expand(const std::string& arg, const std::map<std::string, std::string>& env) {
  std::string out;
  for (size_t i = 0; i < arg.size();) {
    if (arg.compare(i, 2, "$$") == 0) {
      out += '$';
      i += 2;
      continue;
    }
    const auto close = arg.find(')', i);
    if (arg.compare(i, 2, "$(") == 0 && close != std::string::npos) {
      const auto it = env.find(arg.substr(i + 2, close - i - 2));
      if (it != env.end()) {
        out += it->second;
        i = close + 1;
        continue;
      }
    }
    out += arg[i++];
  }
  return out;
}

struct Manifest {
  YAML::Node service, job, container;
  std::map<std::string, YAML::Node> env;  // the container's env entries by name
};

Manifest load_manifest() {
  Manifest m;
  for (const auto& doc : YAML::LoadAllFromFile((source_dir() / kJobManifest).string())) {
    const auto kind = doc["kind"].as<std::string>();
    if (kind == "Service") m.service = doc;
    if (kind == "Job") m.job = doc;
  }
  if (m.job) {
    m.container = m.job["spec"]["template"]["spec"]["containers"][0];
    for (const auto& e : m.container["env"]) m.env.emplace(e["name"].as<std::string>(), YAML::Node(e));
  }
  return m;
}

TEST(DeployKubernetes, ManifestIsAnIndexedJobOfOnePodPerNodeWithTheLaunchersCommand) {
  const Manifest m = load_manifest();
  ASSERT_TRUE(m.service && m.job && m.container);
  const auto job = m.job["metadata"]["name"].as<std::string>();
  const auto service = m.service["metadata"]["name"].as<std::string>();
  const YAML::Node spec = m.job["spec"];
  const YAML::Node pod = spec["template"]["spec"];

  EXPECT_EQ(m.job["apiVersion"].as<std::string>(), "batch/v1");
  EXPECT_EQ(spec["completionMode"].as<std::string>(), "Indexed");
  const int nodes = std::stoi(m.env.at("NODES")["value"].as<std::string>());
  EXPECT_EQ(spec["completions"].as<int>(), nodes);
  EXPECT_EQ(spec["parallelism"].as<int>(), nodes) << "every node at once: the launchers wait for each other";
  EXPECT_EQ(spec["backoffLimit"].as<int>(), 0);
  EXPECT_EQ(pod["restartPolicy"].as<std::string>(), "Never");

  // Pod 0 (the store's host) through the headless Service: <job>-0.<service>, on the Service's port.
  EXPECT_EQ(m.service["spec"]["clusterIP"].as<std::string>(), "None");
  EXPECT_EQ(m.service["spec"]["selector"]["job-name"].as<std::string>(), job);
  EXPECT_EQ(pod["subdomain"].as<std::string>(), service);
  EXPECT_EQ(m.env.at("MASTER_ADDR")["value"].as<std::string>(), job + "-0." + service);
  const std::string port = m.env.at("MASTER_PORT")["value"].as<std::string>();
  EXPECT_EQ(m.service["spec"]["ports"][0]["port"].as<std::string>(), port);
  EXPECT_EQ(m.container["ports"][0]["containerPort"].as<std::string>(), port);

  // The node rank is the completion index (the annotation JOB_COMPLETION_INDEX is read from), one worker per GPU.
  EXPECT_EQ(m.env.at("NODE_RANK")["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>(),
            "metadata.annotations['batch.kubernetes.io/job-completion-index']");
  EXPECT_EQ(m.container["resources"]["limits"]["nvidia.com/gpu"].as<std::string>(),
            m.env.at("GPUS")["value"].as<std::string>());
  EXPECT_FALSE(m.container["command"]) << "the image's entry point, finetune, is the pod's PID 1";
  const auto args = m.container["args"].as<std::vector<std::string>>();
  const std::string joined = fmt_join(args);
  for (const char* part :
       {"train --config ", "--nproc-per-node $(GPUS)", "--nnodes $(NODES)", "--node-rank $(NODE_RANK)",
        "--master-addr $(MASTER_ADDR)", "--master-port $(MASTER_PORT)"}) {
    EXPECT_NE(joined.find(part), std::string::npos) << part << " in " << joined;
  }
}

// The manifest's pod command, on this host: Job completion index i is node rank i; the pods get the manifest's
// variables, except those this host cannot honour (no cluster DNS for MASTER_ADDR, no GPUs, two cores), and the
// tiny run's config for /data/my.yaml. The two pods train as one node of 4 ranks does, bit for bit.
TEST(DeployKubernetes, PodsRunTheManifestsCommandAsTwoNodesOfOneRun) {
  const Manifest m = load_manifest();
  ASSERT_TRUE(m.job && m.container);
  TempDir dir("ft-k8s");
  const fs::path config = write_nodes_config(dir.path(), "pods");
  const int port = free_port();
  std::vector<std::string> commands;
  for (int index = 0; index < m.job["spec"]["completions"].as<int>(); ++index) {
    std::map<std::string, std::string> env;
    for (const auto& [name, e] : m.env) {
      if (e["value"]) env[name] = e["value"].as<std::string>();
    }
    env["NODE_RANK"] = std::to_string(index);  // the downward API's completion index
    env["MASTER_ADDR"] = "127.0.0.1";
    env["MASTER_PORT"] = std::to_string(port);
    env["GPUS"] = "2";
    env["OMP_NUM_THREADS"] = "1";
    std::string command = "env";
    for (const auto& [name, value] : env) command += " " + name + "=" + shell_quote(value);
    command += " " + shell_quote(binary());
    for (const auto& arg : m.container["args"].as<std::vector<std::string>>()) {
      const std::string expanded = expand(arg, env);
      command += " " + shell_quote(expanded == "/data/my.yaml" ? config.string() : expanded);
    }
    commands.push_back(command);
  }
  ASSERT_EQ(commands.size(), 2u);
  TwoNodes pods(commands, dir.path(), "pods");
  for (int n : {0, 1}) {
    const auto code = pods.node[n]->wait(std::chrono::seconds(150));
    ASSERT_TRUE(code.has_value()) << pods.outputs();
    ASSERT_EQ(*code, 0) << pods.outputs();
  }
  EXPECT_NE(pods.output(0).find("launcher: node 0 of 2, 2 workers (ranks 0-1 of 4), store 127.0.0.1:"),
            std::string::npos)
      << pods.output(0);
  EXPECT_NE(pods.output(1).find("launcher: node 1 of 2, 2 workers (ranks 2-3 of 4), store 127.0.0.1:"),
            std::string::npos)
      << pods.output(1);
  expect_same_losses(losses(reference_run()), losses(dir / "pods"), 0.0);
  EXPECT_EQ(max_weight_diff(reference_run(), dir / "pods"), 0.0);
}

}  // namespace
}  // namespace ft::test
