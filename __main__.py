from kafka_mirror.program import main

main()
