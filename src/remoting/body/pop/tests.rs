use super::*;

#[test]
fn given_java_base64_and_rust_byte_array_bitsets_when_parsing_should_read_the_same_bits() {
    // Bits 0, 2 and 9: bytes [0b101, 0b10]; base64 of [5, 2] is "BQI=".
    let java = br#"{"brokerName":"b","acks":[{"c":"G","t":"T","r":"0","so":4,"q":1,"rq":0,"pt":9,"it":60000,"b":"BQI="}]}"#;
    let rust = br#"{"brokerName":"b","acks":[{"c":"G","t":"T","r":"0","so":4,"q":1,"rq":0,"pt":9,"it":60000,"b":[5,2,0,0,0,0,0,0]}]}"#;
    for body in [&java[..], &rust[..]] {
        let b = BatchAckMessageRequestBody::from_json_slice(body).expect("parses");
        let ones: Vec<u64> = b.acks[0].bit_set.ones().collect();
        assert_eq!(ones, [0, 2, 9], "bit i acknowledges offset so + i, in both encodings");
    }
    assert!(
        BatchAckMessageRequestBody::from_json_slice(br#"{"acks":[{"b":"B!"}]}"#).is_err(),
        "a malformed bitset is refused, not read as empty"
    );
}

#[test]
fn given_assignment_response_when_serialising_should_use_the_java_names() {
    let body = QueryAssignmentResponseBody {
        message_queue_assignments: vec![MessageQueueAssignment {
            message_queue: MessageQueue { topic: "T".into(), broker_name: "b".into(), queue_id: 0 },
            mode: MessageRequestMode::Pop,
            attachments: None,
        }],
    };
    let json = String::from_utf8(body.to_json_bytes().expect("serialisable").to_vec()).unwrap();
    assert_eq!(
        json,
        r#"{"messageQueueAssignments":[{"messageQueue":{"topic":"T","brokerName":"b","queueId":0},"mode":"POP","attachments":null}]}"#
    );
}
