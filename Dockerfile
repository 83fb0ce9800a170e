# The kafka-mirror app image for EKS (SparkApplication `image`): the official Apache Spark 4
# image + the `spark_app` and `kmirror` packages + their Python deps + a confluent-kafka built
# against a librdkafka with Cyrus SASL, so GSSAPI (Kerberos) clusters work (the PyPI wheel has
# no GSSAPI) + kinit + the S3A connector for s3a:// checkpoints.
#
#   docker build -t kafka-mirror:dev .
#   docker build --build-arg SPARK_VERSION=4.0.1 -t $REGISTRY/kafka-mirror:0.1.0 . && docker push ...
#
# The SparkApplication runs local:///opt/kmirror/kmirror_main.py (components/specs.py).
ARG SPARK_VERSION=4.0.1
FROM apache/spark:${SPARK_VERSION}-scala2.13-java17-python3-ubuntu

ARG LIBRDKAFKA_VERSION=2.16.0
ARG CONFLUENT_KAFKA_VERSION=2.16.1
# hadoop-aws must match the Hadoop of the Spark distribution (Spark 4.0.x: Hadoop 3.4.1, AWS SDK v2 2.24.6).
ARG HADOOP_AWS_VERSION=3.4.1
ARG AWS_SDK_VERSION=2.24.6

USER root
ENV PIP_NO_CACHE_DIR=1 PIP_BREAK_SYSTEM_PACKAGES=1 DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential curl ca-certificates pkg-config \
      libsasl2-dev libsasl2-modules-gssapi-mit libssl-dev zlib1g-dev libzstd-dev liblz4-dev \
      krb5-user python3-dev python3-pip \
 && rm -rf /var/lib/apt/lists/*

# librdkafka with SASL (GSSAPI via Cyrus SASL) and SSL, then confluent-kafka compiled against it.
RUN curl -fsSL "https://github.com/confluentinc/librdkafka/archive/refs/tags/v${LIBRDKAFKA_VERSION}.tar.gz" \
      | tar -xz -C /tmp \
 && cd "/tmp/librdkafka-${LIBRDKAFKA_VERSION}" \
 && ./configure --prefix=/usr/local --enable-sasl --enable-ssl \
 && make -j"$(nproc)" && make install && ldconfig \
 && rm -rf "/tmp/librdkafka-${LIBRDKAFKA_VERSION}"

COPY scripts/app-requirements.txt /opt/kmirror/requirements.txt
RUN pip3 install --no-binary confluent-kafka "confluent-kafka==${CONFLUENT_KAFKA_VERSION}" \
 && grep -v '^confluent-kafka' /opt/kmirror/requirements.txt > /tmp/requirements-rest.txt \
 && pip3 install -r /tmp/requirements-rest.txt \
 && python3 -c 'import confluent_kafka as c; c.Producer({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "GSSAPI", "sasl.kerberos.kinit.cmd": "true"})'

# S3A for s3a:// checkpoints (credentials from IRSA through the default AWS provider chain).
RUN curl -fsSL -o "/opt/spark/jars/hadoop-aws-${HADOOP_AWS_VERSION}.jar" \
      "https://repo1.maven.org/maven2/org/apache/hadoop/hadoop-aws/${HADOOP_AWS_VERSION}/hadoop-aws-${HADOOP_AWS_VERSION}.jar" \
 && curl -fsSL -o "/opt/spark/jars/bundle-${AWS_SDK_VERSION}.jar" \
      "https://repo1.maven.org/maven2/software/amazon/awssdk/bundle/${AWS_SDK_VERSION}/bundle-${AWS_SDK_VERSION}.jar"

COPY kmirror /opt/kmirror/kmirror
COPY spark_app /opt/kmirror/spark_app
COPY scripts/kmirror_main.py /opt/kmirror/kmirror_main.py
ENV PYTHONPATH=/opt/kmirror PYSPARK_PYTHON=python3 PYSPARK_DRIVER_PYTHON=python3 PYTHONUNBUFFERED=1
RUN python3 -c 'import spark_app.main, kmirror.flowspec' && mkdir -p /etc/kmirror /var/lib/kmirror/checkpoints \
 && chown -R spark:spark /var/lib/kmirror

USER spark
WORKDIR /opt/kmirror
