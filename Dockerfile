# The kafka-mirror app image for EKS (SparkApplication `image`): the official Apache Spark 4.0
# image (Ubuntu 22.04, Python 3.10, Java 17: the Spark and Python the app's second test leg runs,
# `make test-spark40`) + the `spark_app`, `kmirror_engine` and `kmirror` packages + their Python deps
# (scripts/app-requirements.txt, whose markers pick the Python 3.10 pins, hash-locked per architecture) + a confluent-kafka
# built against a librdkafka with Cyrus SASL, so GSSAPI (Kerberos) clusters work (the PyPI wheel
# has no GSSAPI) + kinit + the S3A connector for s3a:// checkpoints.
#
# Every download is verified: pass the sha256 of the librdkafka source tarball you reviewed
# (`curl -fsSL <url below> | sha256sum`); the S3A jars are checked against Maven Central's .sha1.
#
#   docker build --build-arg LIBRDKAFKA_SHA256=<sha256> --build-arg SPARK_BASE_DIGEST=sha256:<digest> \
#     -t $REGISTRY/kafka-mirror:0.1.0 .
#
# The SparkApplication runs local:///opt/kmirror/kmirror_main.py (components/kafka_mirror/eks/specs.py). The
# build ends with the app's own self-check (`python3 -m spark_app --self-check`): it loads the
# data sources into the image's Spark and fails the build if the app could not start there.
ARG SPARK_VERSION=4.0.2
# The base image by digest (a tag can be moved under us): required, the reviewed manifest-list digest of
# apache/spark:<SPARK_VERSION>-scala2.13-java17-python3-ubuntu (`crane digest apache/spark:4.0.2-scala2.13-java17-
# python3-ubuntu` or `docker buildx imagetools inspect`), e.g. --build-arg SPARK_BASE_DIGEST=sha256:<64 hex>.
# Without it the reference ends in a bare `@` and docker build stops at once (CI checks it first).
ARG SPARK_BASE_DIGEST=""
FROM apache/spark:${SPARK_VERSION}-scala2.13-java17-python3-ubuntu@${SPARK_BASE_DIGEST}

ARG LIBRDKAFKA_VERSION=2.16.0
ARG LIBRDKAFKA_SHA256=""
# hadoop-aws must match the Hadoop of the Spark distribution (Spark 4.0.x: Hadoop 3.4.1, AWS SDK v2 2.24.6).
ARG HADOOP_AWS_VERSION=3.4.1
ARG AWS_SDK_VERSION=2.24.6

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# root only to install; the image ends as the base image's spark user (uid 185)
# hadolint ignore=DL3066
USER root
ENV PIP_NO_CACHE_DIR=1 DEBIAN_FRONTEND=noninteractive
# Ubuntu's package versions move with its security updates; the base image tag pins the release.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential curl ca-certificates pkg-config \
      libsasl2-dev libsasl2-modules-gssapi-mit libssl-dev zlib1g-dev libzstd-dev liblz4-dev \
      krb5-user python3-dev python3-pip \
 && rm -rf /var/lib/apt/lists/*

# librdkafka with SASL (GSSAPI via Cyrus SASL) and SSL, from its verified source tarball.
WORKDIR /tmp/librdkafka
RUN if [ -z "${LIBRDKAFKA_SHA256}" ]; then \
      echo "LIBRDKAFKA_SHA256 is required: the sha256 of librdkafka v${LIBRDKAFKA_VERSION}'s source tarball" >&2; \
      exit 2; \
    fi \
 && curl -fsSL -o librdkafka.tar.gz \
      "https://github.com/confluentinc/librdkafka/archive/refs/tags/v${LIBRDKAFKA_VERSION}.tar.gz" \
 && echo "${LIBRDKAFKA_SHA256}  librdkafka.tar.gz" | sha256sum -c - \
 && tar -xzf librdkafka.tar.gz --strip-components=1 \
 && ./configure --prefix=/usr/local --enable-sasl --enable-ssl \
 && make -j"$(nproc)" \
 && make install \
 && ldconfig
WORKDIR /opt/kmirror
RUN rm -rf /tmp/librdkafka

# The app's Python deps, every one by the sha256 of its committed lock (scripts/image-cp310-<arch>.lock,
# resolved from scripts/app-requirements.txt by scripts/hashed-lock-refresh.sh; nothing resolves here:
# --no-deps). confluent-kafka is pinned by its source archive's sha256 and compiled against the
# librdkafka above (the build fails if the client cannot do Kerberos); its build requirements come
# from the same lock, installed first, because pip hashes nothing it puts in an isolated build env.
COPY scripts/image-cp310-x86_64.lock scripts/image-cp310-aarch64.lock /opt/kmirror/locks/
RUN lock="/opt/kmirror/locks/image-cp310-$(uname -m).lock" \
 && if [ ! -f "$lock" ]; then echo "no hashed lock for $(uname -m): $lock (scripts/hashed-lock-refresh.sh)" >&2; exit 2; fi \
 && grep -E '^(setuptools|wheel)==' "$lock" > /opt/kmirror/locks/build-requirements.lock \
 && pip3 install --no-cache-dir --require-hashes --no-deps -r /opt/kmirror/locks/build-requirements.lock \
 && pip3 install --no-cache-dir --require-hashes --no-deps --no-build-isolation --no-binary confluent-kafka -r "$lock" \
 && rm -rf /opt/kmirror/locks \
 && python3 -c 'import confluent_kafka as c; c.Producer({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "GSSAPI", "sasl.kerberos.kinit.cmd": "true"})'

# S3A for s3a:// checkpoints (credentials from IRSA through the default AWS provider chain).
WORKDIR /opt/spark/jars
RUN for jar in "org/apache/hadoop/hadoop-aws/${HADOOP_AWS_VERSION}/hadoop-aws-${HADOOP_AWS_VERSION}.jar" \
               "software/amazon/awssdk/bundle/${AWS_SDK_VERSION}/bundle-${AWS_SDK_VERSION}.jar"; do \
      name="$(basename "$jar")"; \
      curl -fsSL -o "$name" "https://repo1.maven.org/maven2/$jar"; \
      echo "$(curl -fsSL "https://repo1.maven.org/maven2/$jar.sha1")  $name" | sha1sum -c -; \
    done

COPY kmirror /opt/kmirror/kmirror
COPY kmirror_engine /opt/kmirror/kmirror_engine
COPY spark_app /opt/kmirror/spark_app
# The native copy loop (docs/performance.md) against the librdkafka built above; --require: the
# build fails rather than ship an image that silently falls back to the Python loop.
COPY native /opt/kmirror/native
COPY scripts/build-native.sh /opt/kmirror/scripts/build-native.sh
RUN PYTHON=python3 bash /opt/kmirror/scripts/build-native.sh --require
COPY scripts/kmirror_main.py /opt/kmirror/kmirror_main.py
# pyspark and py4j come from the Spark distribution, not pip: the app runs on exactly the image's Spark.
RUN ln -s "$(ls /opt/spark/python/lib/py4j-*-src.zip)" /opt/spark/python/lib/py4j-src.zip
# Compiled code for what every Python process imports: Spark puts pyspark.zip first on each
# worker's path and Python caches nothing for zips (~0.6 s of CPU per worker process,
# docs/performance.md); the image's user cannot write __pycache__ under /opt, so compile there too.
COPY scripts/precompile-pyspark-zip.py /opt/kmirror/scripts/precompile-pyspark-zip.py
RUN python3 /opt/kmirror/scripts/precompile-pyspark-zip.py /opt/spark/python/lib/pyspark.zip /opt/spark/python/lib/py4j-src.zip \
 && python3 -m compileall -q /opt/spark/python/pyspark /opt/kmirror
ENV PYTHONPATH=/opt/kmirror:/opt/spark/python:/opt/spark/python/lib/py4j-src.zip \
    PYSPARK_PYTHON=python3 PYSPARK_DRIVER_PYTHON=python3 PYTHONUNBUFFERED=1
WORKDIR /opt/kmirror
RUN python3 -m spark_app --self-check \
 && mkdir -p /etc/kmirror /var/lib/kmirror/checkpoints \
 && chown -R 185:185 /var/lib/kmirror

# 185 is the image's `spark` user
USER 185
