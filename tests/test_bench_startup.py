"""bench/startup_timeline.py: reading an `strace -f -tt` trace into the app's processes."""

from bench.startup_timeline import parse_trace, timeline

# A driver (100) that runs java (101, via a thread 102 that forks), a Python daemon the JVM starts
# and a worker it forks which connects to the source broker; one clone interrupted by another
# thread's line, as strace prints concurrent calls.
TRACE = """\
100 10:00:00.000000 execve("/v/bin/python", ["python", "-m", "spark_app"], 0x7ffd /* 30 vars */) = 0
100 10:00:00.500000 connect(3, {sa_family=AF_INET, sin_port=htons(9092), sin_addr=inet_addr("127.0.0.1")}, 16) = 0
100 10:00:01.000000 clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|SIGCHLD) = 101
101 10:00:01.100000 execve("/jvm/bin/java", ["java", "org.apache.spark.deploy.SparkSubmit"], 0x1 /* 9 vars */) = 0
101 10:00:01.200000 clone3({flags=CLONE_VM|CLONE_THREAD|CLONE_SIGHAND, child_tid=0x7f}, 88 <unfinished ...>
100 10:00:01.250000 connect(4, {sa_family=AF_INET, sin_port=htons(9093), sin_addr=inet_addr("127.0.0.1")}, 16) = 0
101 10:00:01.300000 <... clone3 resumed> => {parent_tid=[102]}, 88) = 102
102 10:00:03.000000 vfork() = 103
103 10:00:03.100000 execve("/v/bin/python", ["python", "-m", "pyspark.daemon"], 0x2 /* 9 vars */) = 0
103 10:00:03.500000 clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|SIGCHLD) = 104
104 10:00:03.600000 connect(5, {sa_family=AF_INET6, sin6_port=htons(9092), sin6_flowinfo=htonl(0)}, 28) = 0
104 10:00:03.700000 connect(6, {sa_family=AF_INET, sin_port=htons(9092), sin_addr=inet_addr("127.0.0.1")}, 16) = 0
104 10:00:04.000000 +++ exited with 0 +++
102 10:00:05.000000 +++ exited with 0 +++
100 10:00:06.000000 +++ exited with 0 +++
"""


def test_threads_fold_into_their_process_and_forks_name_their_parent():
    procs = parse_trace(TRACE, {9092: "source", 9093: "target"})
    assert sorted(procs) == [100, 101, 103, 104]  # thread 102 is java's
    assert procs[101].program == "java org.apache.spark.deploy.SparkSubmit"
    assert procs[103].parent == 101 and procs[103].program == "python -m pyspark.daemon"
    assert procs[104].parent == 103 and procs[104].program == "fork of python -m pyspark.daemon"
    assert procs[104].first_connect == {"source": 10 * 3600 + 3.6}
    assert procs[100].first_connect == {"source": 36000.5, "target": 36001.25}
    assert procs[104].ended == 36004.0 and procs[101].ended is None  # a thread's exit is not its process's
    assert procs[100].ended == 36006.0


def test_the_timeline_is_in_order_from_the_drivers_start():
    procs = parse_trace(TRACE, {9092: "source"})
    events = timeline(procs, 36000.0, first_read=3.65)
    assert [at for at, _ in events] == sorted(at for at, _ in events)
    assert events[0][0] == 0.0 and "pid 100" in events[0][1]
    assert (3.65, "first record read by a writer task (batch log)") in events
    assert any(what == "pid 104 (fork of python -m pyspark.daemon) first connects to the source" for _, what in events)
